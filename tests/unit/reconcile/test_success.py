"""Judging an attempt (success.py): the success policy, and pending/starting/running with the reason why."""

from __future__ import annotations

import pytest

from multinode.api import Phase
from multinode.api.conditions import Reason
from multinode.reconcile.success import judge
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


# The judge called directly.

@pytest.mark.parametrize(("policy", "pods", "phase", "reason"), [
    ("AllNodes", [pod(0, "Succeeded"), pod(1, "Succeeded")], Phase.SUCCEEDED, Reason.ALL_NODES_SUCCEEDED),
    ("AllNodes", [pod(0, "Succeeded"), pod(1)], Phase.RUNNING, Reason.ALL_NODES_RUNNING),
    ("LeaderOnly", [pod(0, "Succeeded"), pod(1)], Phase.SUCCEEDED, Reason.LEADER_SUCCEEDED),
    ("LeaderOnly", [pod(0), pod(1, "Succeeded")], Phase.RUNNING, Reason.ALL_NODES_RUNNING),
    ("AllNodes", [pod(0)], Phase.PENDING, Reason.CREATING_PODS),
    ("AllNodes", [pod(0), pod(1, "Pending", node=None, unschedulable="0/3 nodes")], Phase.PENDING,
     Reason.UNSCHEDULABLE),
    ("AllNodes", [pod(0), pod(1, "Pending", node=None)], Phase.PENDING, Reason.WAITING_FOR_SCHEDULING),
    ("AllNodes", [pod(0), pod(1, "Pending")], Phase.STARTING, Reason.PODS_STARTING),
    ("AllNodes", [pod(0), pod(1, "Pending", waiting_reason="ErrImagePull")], Phase.STARTING,
     Reason.IMAGE_PULL_FAILING),
    ("AllNodes", [pod(0), pod(1, "Pending", in_preflight=True)], Phase.STARTING, Reason.WAITING_FOR_PEER_DNS),
])
def test_the_judge_gives_the_phase_and_why(policy, pods, phase, reason) -> None:
    verdict = judge(stored_job(2, successPolicy=policy), {p.index: p for p in pods})
    assert (verdict.phase, verdict.reason) == (phase, reason)
