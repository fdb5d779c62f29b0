"""api.base.deep_copied: the planner's copy of a status is equal to it and shares nothing with it."""

from __future__ import annotations

from multinode.api import NodeCounts, NodeStatus, TrainingJobStatus
from multinode.api.base import deep_copied
from multinode.api.goodput import GoodputStatus
from multinode.api.status import Condition, RestartRecord

T0 = "2026-11-28T00:00:00Z"


def running_status() -> TrainingJobStatus:
    return TrainingJobStatus(
        phase="Running", attempt=1, restarts=1, ready_nodes=2, num_nodes=2, ready="2/2", start_time=T0,
        conditions=[Condition(type="Running", status="True", reason="AllPodsRunning", last_transition_time=T0)],
        node_statuses=[NodeStatus(index=i, pod=f"llama-{i}-a1", node=f"gpu-{i}", phase="Running") for i in range(2)],
        node_counts=NodeCounts(running=2),
        restart_history=[RestartRecord(attempt=0, reason="PodFailed", counted=True, time=T0)],
        goodput=GoodputStatus(accounted_until=T0))


def test_the_copy_is_equal_and_changing_it_leaves_the_original_as_it_was() -> None:
    status = running_status()
    copy = deep_copied(status)
    assert copy == status and type(copy) is TrainingJobStatus
    copy.node_statuses[0].phase = "Failed"
    copy.conditions.append(Condition(type="Ready", status="False", reason="PodFailed", last_transition_time=T0))
    copy.restart_history[0].message = "changed"
    assert copy.goodput is not None and status.goodput is not None and copy.goodput is not status.goodput
    assert status == running_status()


def test_a_value_set_in_code_beyond_its_bound_is_still_copied() -> None:
    """Assignment is not validated; the copy of such a model must not fail the reconcile."""
    status = running_status()
    status.restart_history[0].reason = "R" * 1000  # maxLength 128
    copy = deep_copied(status)
    assert copy == status and copy.restart_history[0] is not status.restart_history[0]
