"""Node-loss tolerations (render/tolerations.py): ours unless the podTemplate tolerates the key itself."""

from __future__ import annotations

import pytest
from multinode.testing import stored_job

from multinode.render import render_node_pod
from multinode.render.tolerations import pod_tolerations, tolerated_seconds

NOT_READY, UNREACHABLE = "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"


def test_every_pod_tolerates_node_loss_for_the_default_5_seconds_not_kubernetes_300() -> None:
    tolerations = render_node_pod(stored_job(2), 1, 0)["spec"]["tolerations"]
    assert tolerations == [
        {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
        {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
    ]
    assert tolerated_seconds(tolerations, NOT_READY) == tolerated_seconds(tolerations, UNREACHABLE) == 5.0


def test_the_field_sets_the_seconds() -> None:
    job = stored_job(2, failurePolicy={"nodeLossTolerationSeconds": 0})
    assert {t["tolerationSeconds"] for t in pod_tolerations(job)} == {0}


def test_a_users_toleration_for_one_key_wins_for_that_key_only() -> None:
    mine = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600}
    tolerations = pod_tolerations(stored_job(2, podTemplate={"tolerations": [mine]}))
    assert tolerations[0] == mine
    assert [t["key"] for t in tolerations] == [UNREACHABLE, NOT_READY]
    assert tolerated_seconds(tolerations, UNREACHABLE) == 600.0
    assert tolerated_seconds(tolerations, NOT_READY) == 5.0


@pytest.mark.parametrize("mine", [
    pytest.param({"operator": "Exists"}, id="tolerate-everything"),
    pytest.param({"key": NOT_READY, "operator": "Exists"}, id="any-effect-no-seconds"),
])
def test_a_toleration_without_seconds_keeps_pods_forever(mine: dict) -> None:
    tolerations = pod_tolerations(stored_job(2, podTemplate={"tolerations": [mine]}))
    assert tolerated_seconds(tolerations, NOT_READY) is None


def test_no_toleration_means_eviction_at_once_and_other_effects_do_not_count() -> None:
    assert tolerated_seconds([], NOT_READY) == 0.0
    assert tolerated_seconds([{"key": NOT_READY, "operator": "Exists", "effect": "NoSchedule"}], NOT_READY) == 0.0
