"""Judging an attempt (success.py): the success policy, and pending/starting/running with the reason why."""

from __future__ import annotations

from multinode.api import Phase
from tests.unit.reconcile.planning import condition, pod, run
from multinode.testing import stored_job


def test_phase_walks_pending_starting_running() -> None:
    job = stored_job(2)
    unscheduled = run(job, [pod(0, "Pending", node=None), pod(1, "Pending")])
    starting = run(job, [pod(0, "Pending"), pod(1, "Running")], previous=unscheduled.status)
    running = run(job, [pod(0), pod(1)], previous=starting.status)

    assert unscheduled.status.phase == Phase.PENDING
    assert condition(unscheduled.status, "Running").reason == "WaitingForScheduling"
    assert starting.status.phase == Phase.STARTING
    assert condition(starting.status, "Running").message == "1/2 pods running; the rest are scheduled and starting"
    assert running.status.phase == Phase.RUNNING
    assert (running.status.ready_nodes, running.status.ready) == (2, "2/2")
    assert condition(running.status, "Running").status == "True"
    assert [n.node for n in running.status.node_statuses] == ["gpu-node-0", "gpu-node-0"]


def test_unschedulable_pods_are_explained_with_the_schedulers_words() -> None:
    message = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    result = run(stored_job(2), [pod(0, "Pending", node=None, unschedulable=message), pod(1, "Pending", node=None)])

    running = condition(result.status, "Running")
    assert result.status.phase == Phase.PENDING
    assert running.reason == "Unschedulable"
    assert running.message == f"1/2 pods cannot be scheduled; llama-0-a0: {message}"


def test_leader_only_success_stops_the_workers() -> None:
    job = stored_job(3, successPolicy="LeaderOnly")
    result = run(job, [pod(0, "Succeeded"), pod(1), pod(2)])

    assert result.status.phase == Phase.SUCCEEDED
    assert condition(result.status, "Succeeded").reason == "LeaderSucceeded"
    assert result.pods_to_delete == ["llama-1-a0", "llama-2-a0"]


def test_all_nodes_policy_waits_for_every_pod() -> None:
    result = run(stored_job(2), [pod(0, "Succeeded"), pod(1)])

    assert result.status.phase == Phase.RUNNING
