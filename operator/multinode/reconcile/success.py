"""Judging an attempt that has not failed: succeeded (by spec.successPolicy), running, starting or
pending, and the reason a user reads for it."""

from __future__ import annotations

from multinode.api import Phase, SuccessPolicy, TrainingJob
from multinode.api.conditions import Reason
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.outcome import Verdict
from multinode.reconcile.startup import why_starting


def leader_succeeded(job: TrainingJob, current: dict[int, ObservedPod]) -> bool:
    """LeaderOnly: node 0 exiting 0 is the job's success, whatever the other nodes do after it."""
    leader = current.get(0)
    return (job.spec.success_policy == SuccessPolicy.LEADER_ONLY and leader is not None
            and leader.phase == PodPhase.SUCCEEDED)


def judge(job: TrainingJob, current: dict[int, ObservedPod]) -> Verdict:
    """The phase of an attempt that has not failed: succeeded, running, starting or pending, and why."""
    num_nodes = job.spec.num_nodes
    succeeded = {i for i, p in current.items() if p.phase == PodPhase.SUCCEEDED}
    if leader_succeeded(job, current):
        return Verdict(Phase.SUCCEEDED, Reason.LEADER_SUCCEEDED, "node 0 (the leader) succeeded")
    if len(succeeded) == num_nodes:
        return Verdict(Phase.SUCCEEDED, Reason.ALL_NODES_SUCCEEDED, f"all {num_nodes} nodes succeeded")
    if len(current) < num_nodes:
        return Verdict(Phase.PENDING, Reason.CREATING_PODS, f"{len(current)}/{num_nodes} pods created")
    by_index = sorted(current.values(), key=lambda p: p.index)
    unschedulable = [p for p in by_index if p.unschedulable]
    if unschedulable:
        p = unschedulable[0]
        return Verdict(Phase.PENDING, Reason.UNSCHEDULABLE,
                       f"{len(unschedulable)}/{num_nodes} pods cannot be scheduled; {p.name}: {p.unschedulable}")
    unscheduled = [p for p in by_index if p.node is None]
    if unscheduled:
        return Verdict(Phase.PENDING, Reason.WAITING_FOR_SCHEDULING,
                       f"{len(unscheduled)}/{num_nodes} pods not scheduled yet")
    running = [p for p in by_index if p.phase == PodPhase.RUNNING]
    if len(running) + len(succeeded) == num_nodes:
        return Verdict(Phase.RUNNING, Reason.ALL_NODES_RUNNING, f"all {num_nodes} nodes running")
    return why_starting(by_index, running, num_nodes)
