"""Final sync: a job with spec.checkpointing that has finished training stays open (its phase unchanged)
until the mirror pod reports its last pass (status.checkpoints.finalSyncTime), or until
spec.checkpointing.finalSyncTimeoutSeconds passes.

The final pass takes the newest checkpoints without waiting for them to settle (nothing writes any more),
so it is requested only once no pod of the job may write: every pod has exited (Succeeded or Failed) or
is gone. Until then the condition is CheckpointsSynced=False/FinalSyncWaitingForPods, naming the pods;
then CheckpointsSynced=False/FinalSyncRequested, which the mirror reads. Its lastTransitionTime is when
the wait began (training ended), and the timeout counts from there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.status import ConditionStatus
from multinode.api.timestamps import parse_time
from multinode.reconcile.conditions import find_condition
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.outcome import Event

_NAMED = 3   # pods the waiting message names


@dataclass(frozen=True)
class FinalSync:
    """What the final-sync gate decided for a job whose training just ended."""

    hold: bool  # keep the job open (not yet terminal)
    reason: str
    message: str
    requeue_after: float | None = None


def may_write(pods: Iterable[ObservedPod]) -> list[str]:
    """The pods that may still write into the cache: any not exited yet (a deleted one until it is gone)."""
    return sorted(p.name for p in pods if p.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED))


def final_sync_gate(job: TrainingJob, status: TrainingJobStatus, now: datetime, writing: list[str]) -> FinalSync:
    ckpt = job.spec.checkpointing
    assert ckpt is not None
    synced = status.checkpoints.final_sync_time if status.checkpoints else None
    if synced:
        return FinalSync(False, Reason.FINAL_SYNC_DONE, f"final checkpoint sync finished at {synced}")
    waiting = find_condition(status.conditions, ConditionType.CHECKPOINTS_SYNCED)
    began = parse_time(waiting.last_transition_time, now) if waiting is not None and waiting.status == "False" else now
    left = ckpt.final_sync_timeout_seconds - (now - began).total_seconds()
    if left <= 0:
        return FinalSync(False, Reason.FINAL_SYNC_TIMED_OUT,
                         f"the mirror did not finish its final sync within {ckpt.final_sync_timeout_seconds}s; "
                         "the newest checkpoints may exist only in the cache")
    if writing:
        named = ", ".join(writing[:_NAMED]) + (f" and {len(writing) - _NAMED} more" if len(writing) > _NAMED else "")
        return FinalSync(True, Reason.FINAL_SYNC_WAITING_FOR_PODS,
                         f"training finished; the final checkpoint sync waits until no pod may write: {named} "
                         "not exited yet", requeue_after=left)
    return FinalSync(True, Reason.FINAL_SYNC_REQUESTED,
                     "training finished; waiting for the mirror's final checkpoint sync", requeue_after=left)


def hold_for_final_sync(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus, now: datetime,
                        pods: Iterable[ObservedPod]) -> tuple[bool, Decision]:
    """For a job that finished training: whether it stays open for the mirror's final sync, and the
    CheckpointsSynced condition (with, while it waits, Running False, the first request's Event and a timer).
    `pods`: every pod of the job observed (the final sync waits until none may write)."""
    if job.spec.checkpointing is None:
        return False, Decision()
    gate = final_sync_gate(job, status, now, may_write(pods))
    synced: ConditionStatus = "True" if not gate.hold and gate.reason != Reason.FINAL_SYNC_TIMED_OUT else "False"
    previously = find_condition(before.conditions, ConditionType.CHECKPOINTS_SYNCED)
    first_request = gate.reason == Reason.FINAL_SYNC_REQUESTED and (previously is None
                                                                    or previously.reason != gate.reason)
    condition = SetCondition(ConditionType.CHECKPOINTS_SYNCED, synced, gate.reason, gate.message)
    if not gate.hold:
        return False, Decision(conditions=(condition,))
    return True, Decision(
        conditions=(condition, SetCondition(ConditionType.RUNNING, "False", Reason.FINAL_SYNC, gate.message)),
        events=(Event("Normal", gate.reason, gate.message),) if first_request else (),
        requeue_after=gate.requeue_after)
