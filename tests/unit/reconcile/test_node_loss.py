"""Nodes that stop answering (node_loss.py): evicted pods fail the attempt at once, stranded old pods are
force-deleted."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
import pytest

from multinode.api.timestamps import rfc3339
from multinode.reconcile.node_loss import (GONE, MAX_FORCE_DELETE_EVENTS, NodeDown, force_delete_stranded,
                                           judge_down_nodes, node_down)
from multinode.reconcile.placement import observe_node
from tests.unit.reconcile.planning import NOW, pod, run
from multinode.testing import stored_job

DEAD = {"dead": NodeDown("Unknown", "2026-11-20T11:58:00Z")}


def test_a_pod_evicted_from_a_dead_node_restarts_the_gang_without_waiting_for_it_to_go() -> None:
    # A dead kubelet never confirms the deletion: the pod stays Terminating, phase Running, for good.
    job = stored_job(2)
    running = run(job, [pod(0), pod(1)])
    evicted = run(job, [pod(0), pod(1, terminating=True, disruption="DeletionByTaintManager")], previous=running.status)

    assert evicted.pods_to_create == []
    assert evicted.pods_to_delete == ["llama-0-a0"], "the terminating pod is already on its way out"
    status = evicted.status
    assert (status.phase, status.attempt, status.restarts, status.uncounted_restarts) == (Phase.RESTARTING, 1, 0, 1)
    record = status.restart_history[-1]
    assert (record.reason, record.counted) == ("NodeLost", False)
    assert "llama-1-a0" in record.message and "DeletionByTaintManager" in record.message


def test_old_pods_stuck_terminating_on_a_node_that_is_not_ready_are_force_deleted_and_do_not_block() -> None:
    job = stored_job(2)  # BlockingRecreate by default: the next attempt waits for the old pods
    running = run(job, [pod(0), pod(1)])
    restarting = run(job, [pod(0), pod(1, terminating=True, node="dead")], previous=running.status)
    assert restarting.status.attempt == 1
    old = [pod(0, terminating=True), pod(1, terminating=True, node="dead")]

    later = NOW + timedelta(minutes=1)
    waiting = run(job, old, previous=restarting.status, now=later)
    assert waiting.pods_to_force_delete == [] and waiting.pods_to_create == [], "without node facts, it waits"

    stuck = run(job, old, previous=restarting.status, now=later, down_nodes=DEAD)
    assert stuck.pods_to_force_delete == ["llama-1-a0"]
    assert [(e.type, e.reason) for e in stuck.events] == [("Warning", "PodForceDeleted")]
    assert stuck.pods_to_create == [], "llama-0-a0 on a Ready node is still on its way out"

    both_dead = [pod(0, terminating=True, node="dead"), pod(1, terminating=True, node="dead")]
    freed = run(job, both_dead, previous=restarting.status, now=later, down_nodes=DEAD)
    assert sorted(freed.pods_to_force_delete) == ["llama-0-a0", "llama-1-a0"]
    assert [p["metadata"]["name"] for p in freed.pods_to_create] == ["llama-0-a1", "llama-1-a1"]


# ---- a node whose Ready condition is not True (the operator does not wait for the 300 s eviction) ----

def _down(status: str, seconds_ago: float) -> dict[str, NodeDown]:
    return {"dead": NodeDown(status, rfc3339(NOW - timedelta(seconds=seconds_ago)))}


def _on_dead_node():
    return [pod(0), pod(1, node="dead")]


@pytest.mark.parametrize("status", ["Unknown", "False"])
def test_a_pod_on_a_node_down_longer_than_its_toleration_restarts_the_gang_uncounted(status: str) -> None:
    job = stored_job(2)  # nodeLossTolerationSeconds 5 by default
    running = run(job, _on_dead_node())
    lost = run(job, _on_dead_node(), previous=running.status, down_nodes=_down(status, 6))

    s = lost.status
    assert (s.phase, s.attempt, s.restarts, s.uncounted_restarts) == (Phase.RESTARTING, 1, 0, 1)
    record = s.restart_history[-1]
    assert (record.reason, record.counted) == ("NodeLost", False)
    assert "llama-1-a0" in record.message and "dead" in record.message
    # Its kubelet will never confirm a graceful deletion: gone at once; the healthy node's pod stops normally.
    assert lost.pods_to_force_delete == ["llama-1-a0"]
    assert lost.pods_to_delete == ["llama-0-a0"]
    assert ("Warning", "PodForceDeleted") in [(e.type, e.reason) for e in lost.events]


def test_a_node_back_to_ready_within_the_toleration_costs_nothing() -> None:
    job = stored_job(2, failurePolicy={"nodeLossTolerationSeconds": 30})
    running = run(job, _on_dead_node())
    flapped = run(job, _on_dead_node(), previous=running.status, down_nodes=_down("Unknown", 20))
    back = run(job, _on_dead_node(), previous=flapped.status, now=NOW + timedelta(seconds=15))
    assert back.status.attempt == 0 and back.status.uncounted_restarts == 0 and back.pods_to_delete == []


# The policy called directly: the toleration a pod has for its node's state decides.
USERS_OWN = {"podTemplate": {"tolerations": [   # NotReady for 10 minutes, an unreachable node forever
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}]}}


@pytest.mark.parametrize(("spec", "down", "lost", "requeue"), [
    ({}, _down("Unknown", 6), True, None),                                    # 5 s by default
    ({"failurePolicy": {"nodeLossTolerationSeconds": 30}}, _down("Unknown", 20), False, 10.0),  # comes back then
    ({"failurePolicy": {"nodeLossTolerationSeconds": 0}}, _down("False", 0), True, None),  # at the first sight
    (USERS_OWN, _down("False", 60), False, 540.0),                            # the user's own toleration decides
    (USERS_OWN, _down("Unknown", 3600), False, None),                         # tolerated forever: no timer
    (USERS_OWN, _down("False", 601), True, None),
    # The node index may lag behind a node that just registered: "gone" alone never fails an attempt.
    ({}, {"dead": NodeDown(GONE)}, False, None),
    ({}, {}, False, None),
])
def test_a_pod_on_a_node_down_longer_than_it_tolerates_is_lost(spec, down, lost, requeue) -> None:
    decided = judge_down_nodes(stored_job(2, **spec), _on_dead_node(), down, NOW)
    assert decided.requeue_after == (pytest.approx(requeue) if requeue is not None else None)
    assert (decided.failure is not None) == lost
    if lost:
        assert decided.failure.reason == "NodeLost" and decided.failure.node_loss
        assert "llama-1-a0" in decided.failure.message and "dead" in decided.failure.message


@pytest.mark.parametrize(("pods", "deleting", "forcing", "forced"), [
    ([pod(0, terminating=True, node="dead"), pod(1, terminating=True)], (), (), ("llama-0-a0",)),  # Ready: waits
    ([pod(0, node="dead")], (), (), ()),                                   # not on its way out: not this policy's
    ([pod(0, node="dead")], {"llama-0-a0"}, (), ("llama-0-a0",)),          # deleted this pass
    ([pod(0, terminating=True, node="dead")], (), {"llama-0-a0"}, ()),     # forced already
])
def test_pods_on_their_way_out_on_a_down_node_are_force_deleted(pods, deleting, forcing, forced) -> None:
    decided = force_delete_stranded(pods, _down("Unknown", 60), deleting=deleting, forcing=forcing)
    assert decided.force_delete == forced and len(decided.events) == len(forced)


def test_old_pods_on_a_down_node_are_force_deleted_even_before_they_show_as_terminating() -> None:
    job = stored_job(2)
    running = run(job, _on_dead_node())
    restarting = run(job, _on_dead_node(), previous=running.status, down_nodes=_down("Unknown", 6))
    # The operator's watch has not seen its own deletions yet: the old pods still look active.
    again = run(job, _on_dead_node(), previous=restarting.status, now=NOW + timedelta(seconds=1),
                down_nodes=_down("Unknown", 7))
    assert again.pods_to_force_delete == ["llama-1-a0"] and again.pods_to_delete == ["llama-0-a0"]
    # Once the healthy node's pod is gone, BlockingRecreate does not wait for the dead node's.
    later = NOW + timedelta(seconds=6)
    next_attempt = run(job, [pod(1, node="dead")], previous=restarting.status, now=later,
                       down_nodes=_down("Unknown", 12))
    assert [p["metadata"]["name"] for p in next_attempt.pods_to_create] == ["llama-0-a1", "llama-1-a1"]


def test_the_old_attempts_pod_coming_back_never_counts_for_the_new_attempt() -> None:
    # The fence, as the planner sees it: the partitioned node returns with llama-1-a0 still Running.
    job = stored_job(2)
    running = run(job, _on_dead_node())
    restarting = run(job, _on_dead_node(), previous=running.status, down_nodes=_down("Unknown", 6))
    returned = [pod(1, node="dead"), pod(0, attempt=1), pod(1, attempt=1, phase="Pending", node=None)]
    later = run(job, returned, previous=restarting.status, now=NOW + timedelta(seconds=10))
    assert later.status.attempt == 1 and later.status.ready_nodes == 1, "only llama-0-a1 is ready"
    assert "llama-1-a0" in later.pods_to_delete, "the returning old pod is stopped, not adopted"
    assert [p["metadata"]["name"] for p in later.pods_to_create] == []


def test_node_down_reads_the_ready_condition_as_written() -> None:
    def node(status: str | None) -> dict:
        conditions = [] if status is None else [
            {"type": "Ready", "status": status, "lastTransitionTime": "2026-11-20T11:59:00Z"}]
        return {"metadata": {"name": "n"}, "status": {"conditions": conditions}}

    assert node_down(observe_node(node("True"))) is None
    assert node_down(observe_node(node("Unknown"))) == NodeDown("Unknown", "2026-11-20T11:59:00Z")
    assert node_down(observe_node(node("False"))) == NodeDown("False", "2026-11-20T11:59:00Z")
    assert node_down(observe_node(node(None))) == NodeDown("Unknown", None)
    assert node_down(None) == NodeDown(GONE)


def test_force_deleting_a_whole_racks_pods_posts_a_bounded_number_of_events() -> None:
    pods = [pod(i, node=f"n{i % 3}", terminating=True) for i in range(50)]
    down = {f"n{k}": NodeDown("False") for k in range(3)}
    decided = force_delete_stranded(pods, down)
    assert decided.force_delete == tuple(p.name for p in pods)
    assert len(decided.events) == MAX_FORCE_DELETE_EVENTS + 1
    assert decided.events[-1].message.startswith("40 more pods on nodes that are down")
