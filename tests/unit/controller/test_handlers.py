"""The operator registers no change-detecting handlers, so it keeps no kopf diff-base (a deep copy per event)."""

from __future__ import annotations

import inspect

import kopf

from multinode.controller.handlers import NoDiffBase, build_registry, configure_kopf
from multinode.controller.settings import OperatorSettings


def test_no_change_or_spawning_handlers_are_registered() -> None:
    """NoDiffBase is safe only while nothing compares diff-bases: no on.create/update/resume, no daemons."""
    reg = build_registry(OperatorSettings(namespaces=("default",)))
    assert not reg._changing.get_all_handlers()
    assert not reg._spawning.get_all_handlers()


def test_no_diffbase_builds_nothing_and_writes_nothing() -> None:
    storage = NoDiffBase()
    body = kopf.Body({"metadata": {"name": "p", "annotations": {}}, "spec": {"containers": [{"name": "c"}]}})
    patch = kopf.Patch()
    assert storage.build(body=body) is None
    assert storage.fetch(body=body) is None
    storage.store(body=body, patch=patch, essence=None)
    assert not patch


def test_configure_installs_it() -> None:
    settings = kopf.OperatorSettings()
    configure_kopf(settings, OperatorSettings(namespaces=("default",)))
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBase)


def test_the_startup_handler_takes_every_index_the_registry_declares() -> None:
    # kopf passes its indices (by id, as keyword arguments) to startup handlers too: the Reconciler is
    # built with them, so an index added or renamed without the startup handler taking it fails here.
    reg = build_registry(OperatorSettings(namespaces=("default",)))
    startup = [h for h in reg._activities.get_all_handlers() if h.id.endswith("configure")]
    assert len(startup) == 1
    taken = set(inspect.signature(startup[0].fn).parameters)
    declared = {h.id for h in reg._indexing.get_all_handlers()}
    assert declared == {"job_index", "service_index", "pod_group_index", "workload_index", "flavor_index"}
    assert declared <= taken


def test_kopf_watches_no_pods_and_no_nodes() -> None:
    # kopf's start-up wait for its indices wakes every listed object per listed object (informer.py): the
    # thousands of pods and nodes are our own informers' (watches.py), never kopf's.
    reg = build_registry(OperatorSettings(namespaces=("default",)))
    handlers = [*reg._indexing.get_all_handlers(), *reg._watching.get_all_handlers()]
    watched = {h.selector.plural for h in handlers if h.selector is not None}
    assert watched.isdisjoint({"pods", "nodes"})
