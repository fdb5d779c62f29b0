"""Checkpoint decisions of the planner: where an attempt resumes from, keeping the mirror alive, and
holding a finished job open until the mirror's final sync is done."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.constants import CONDITION_CHECKPOINTS_SYNCED
from multinode.reconcile.conditions import find_condition
from multinode.reconcile.observe import ObservedMirror, ObservedPod


def resume_path(job: TrainingJob, status: TrainingJobStatus, attempt_pods: list[ObservedPod],
                resume_source_latest: str | None) -> str:
    """Where the current attempt resumes from: "" when there is nothing to resume.

    Pods of one attempt must agree, so a pod that already exists decides (an operator restarted
    halfway through creating a gang must not give the rest a newer checkpoint). Otherwise: this job's
    own latest mirrored checkpoint, then spec.checkpointing.resumeFrom.
    """
    for pod in attempt_pods:
        if pod.resume_from is not None:
            return pod.resume_from
    ckpt = job.spec.checkpointing
    if ckpt is None:
        return ""
    latest = status.checkpoints.latest if status.checkpoints else None
    if latest is not None:
        return latest.path
    if ckpt.resume_from is not None:
        if ckpt.resume_from.path:
            return ckpt.resume_from.path
        return resume_source_latest or ""
    return ""


def mirror_needs(mirror: ObservedMirror | None, final_sync_done: bool) -> tuple[bool, bool]:
    """(create, delete) for the mirror pod. A failed mirror is deleted and recreated next round; one
    that exited 0 before its final sync was asked for is replaced too."""
    if mirror is None:
        return True, False
    if mirror.terminating:
        return False, False
    if mirror.phase == "Failed" or (mirror.phase == "Succeeded" and not final_sync_done):
        return False, True
    return False, False


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
        return FinalSync(False, "FinalSyncDone", f"final checkpoint sync finished at {synced}")
    requested = find_condition(status.conditions, CONDITION_CHECKPOINTS_SYNCED)
    if requested is None or requested.status != "False":
        return FinalSync(True, "FinalSyncRequested",
                         "training finished; waiting for the mirror's final checkpoint sync",
                         requeue_after=float(ckpt.final_sync_timeout_seconds))
    since = datetime.strptime(requested.last_transition_time, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=now.tzinfo)
    waited = (now - since).total_seconds()
    if waited >= ckpt.final_sync_timeout_seconds:
        return FinalSync(False, "FinalSyncTimedOut",
                         f"the mirror did not finish its final sync within {ckpt.final_sync_timeout_seconds}s; "
                         "the newest checkpoints may exist only in the cache")
    return FinalSync(True, requested.reason, requested.message,
                     requeue_after=ckpt.final_sync_timeout_seconds - waited)
