"""Nodes that stop answering (node_loss.py): evicted pods fail the attempt at once, stranded old pods are
force-deleted."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from tests.unit.reconcile.planning import NOW, pod, run
from localcluster.harness.trainingjobs import stored_job


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

    stuck = run(job, old, previous=restarting.status, now=later, unreachable_nodes=frozenset({"dead"}))
    assert stuck.pods_to_force_delete == ["llama-1-a0"]
    assert [(e.type, e.reason) for e in stuck.events] == [("Warning", "PodForceDeleted")]
    assert stuck.pods_to_create == [], "llama-0-a0 on a Ready node is still on its way out"

    both_dead = [pod(0, terminating=True, node="dead"), pod(1, terminating=True, node="dead")]
    freed = run(job, both_dead, previous=restarting.status, now=later, unreachable_nodes=frozenset({"dead"}))
    assert sorted(freed.pods_to_force_delete) == ["llama-0-a0", "llama-1-a0"]
    assert [p["metadata"]["name"] for p in freed.pods_to_create] == ["llama-0-a1", "llama-1-a1"]
