"""kopf runs the operator and watches nothing itself: every object comes from our own informers
(controller/handlers.py says why)."""

from __future__ import annotations

import kopf

from multinode.api import GROUP, PLURAL, VERSION
from multinode.integrations.registry import INTEGRATIONS
from multinode.testing import seen_integrations
from multinode.controller.handlers import build_registry, configure_kopf, namespaced_kinds
from multinode.controller.settings import OperatorSettings
from multinode.controller.stores import Stores
from tests.unit.controller.test_watches import Queued


def test_kopf_has_no_resource_handler_and_no_index() -> None:
    # An index makes kopf hold back every event until each of its watches has listed, and under a namespace
    # glob kopf misses namespaces its own LIST returns: kopf registers start-up, log-in and clean-up only.
    reg = build_registry(OperatorSettings(namespaces=("team-*",)))
    assert not reg._indexing.get_all_handlers()
    assert not reg._watching.get_all_handlers()
    assert not reg._changing.get_all_handlers() and not reg._spawning.get_all_handlers()
    assert {h.id.rsplit(".", 1)[-1] for h in reg._activities.get_all_handlers()} == {"configure", "login", "shutdown"}


def test_kopf_scans_and_observes_nothing() -> None:
    settings = kopf.OperatorSettings()
    configure_kopf(settings)
    assert settings.scanning.disabled


def test_the_trainingjobs_are_watched_in_every_followed_namespace_first() -> None:
    stores = Stores.for_integrations(INTEGRATIONS)
    kinds = namespaced_kinds(Queued(), stores, seen_integrations(gang_api=True, kueue_api=True))
    assert kinds[0].path("team-a") == f"/apis/{GROUP}/{VERSION}/namespaces/team-a/{PLURAL}"
    assert kinds[0].index is stores.jobs.index and kinds[0].label_selector is None
    assert [k.plural for k in kinds] == [PLURAL, "pods", "pods", "services", "podgroups", "workloads"]
    assert kinds[4].path("team-a") == "/apis/scheduling.k8s.io/v1alpha2/namespaces/team-a/podgroups"
    assert [k.plural for k in namespaced_kinds(Queued(), stores, seen_integrations())] == [
        PLURAL, "pods", "pods", "services"]  # an integration whose API is not served watches nothing
