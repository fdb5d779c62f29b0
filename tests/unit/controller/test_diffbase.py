"""The operator registers no change-detecting handlers, so it keeps no kopf diff-base (a deep copy per event)."""

from __future__ import annotations

import asyncio

import kopf

import multinode.controller.handlers as handlers
from multinode.controller.handlers import NoDiffBase, build_registry
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
    reg = build_registry(OperatorSettings(namespaces=("default",)))
    startup = [h for h in reg._activities.get_all_handlers() if h.id.endswith("configure")]
    assert len(startup) == 1
    settings = kopf.OperatorSettings()

    class Stop(Exception):
        pass

    # configure() continues into client set-up after the settings; stop it there.
    original = handlers.load_api_client
    handlers.load_api_client = lambda **_: (_ for _ in ()).throw(Stop())
    try:
        asyncio.run(startup[0].fn(settings=settings))
    except Stop:
        pass
    finally:
        handlers.load_api_client = original
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBase)
