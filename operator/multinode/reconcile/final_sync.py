"""Final sync: a job with spec.checkpointing that has finished training stays open (its phase unchanged)
until the mirror pod reports its last pass (status.checkpoints.finalSyncTime), or until
spec.checkpointing.finalSyncTimeoutSeconds passes.

The request is the condition CheckpointsSynced=False/FinalSyncRequested, which the mirror reads; its
lastTransitionTime is when the wait began.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.status import ConditionStatus
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.conditions import find_condition, set_condition
from multinode.reconcile.outcome import Event, Plan


@dataclass(frozen=True)
class FinalSync:
    """What the final-sync gate decided for a job whose training just ended."""

    hold: bool  # keep the job open (not yet terminal)
    reason: str
    message: str
    requeue_after: float | None = None


def final_sync_gate(job: TrainingJob, status: TrainingJobStatus, now: datetime) -> FinalSync:
    ckpt = job.spec.checkpointing
    assert ckpt is not None
    synced = status.checkpoints.final_sync_time if status.checkpoints else None
    if synced:
        return FinalSync(False, Reason.FINAL_SYNC_DONE, f"final checkpoint sync finished at {synced}")
    requested = find_condition(status.conditions, ConditionType.CHECKPOINTS_SYNCED)
    if requested is None or requested.status != "False":
        return FinalSync(True, Reason.FINAL_SYNC_REQUESTED,
                         "training finished; waiting for the mirror's final checkpoint sync",
                         requeue_after=float(ckpt.final_sync_timeout_seconds))
    waited = (now - parse_time(requested.last_transition_time, now)).total_seconds()
    if waited >= ckpt.final_sync_timeout_seconds:
        return FinalSync(False, Reason.FINAL_SYNC_TIMED_OUT,
                         f"the mirror did not finish its final sync within {ckpt.final_sync_timeout_seconds}s; "
                         "the newest checkpoints may exist only in the cache")
    return FinalSync(True, requested.reason, requested.message,
                     requeue_after=ckpt.final_sync_timeout_seconds - waited)


def hold_for_final_sync(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus, result: Plan,
                        now: datetime) -> bool:
    """Set CheckpointsSynced for a job that finished training; True while the job must stay open for it."""
    if job.spec.checkpointing is None:
        return False
    generation = job.metadata.generation
    gate = final_sync_gate(job, status, now)
    synced: ConditionStatus = "True" if not gate.hold and gate.reason != Reason.FINAL_SYNC_TIMED_OUT else "False"
    first_request = not any(c.type == ConditionType.CHECKPOINTS_SYNCED for c in before.conditions)
    set_condition(status.conditions, ConditionType.CHECKPOINTS_SYNCED, synced, gate.reason, gate.message,
                  now=rfc3339(now), generation=generation)
    if not gate.hold:
        return False
    if first_request:
        result.events.append(Event("Normal", gate.reason, gate.message))
    set_condition(status.conditions, ConditionType.RUNNING, "False", Reason.FINAL_SYNC, gate.message,
                  now=rfc3339(now), generation=generation)
    result.come_back_in(gate.requeue_after)
    return True
