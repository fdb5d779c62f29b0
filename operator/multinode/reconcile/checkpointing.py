"""Checkpoint decisions of the planner: where an attempt resumes from, and keeping the mirror alive.
(Holding a finished job open for the mirror's final sync is final_sync.py.)"""

from __future__ import annotations

from datetime import datetime

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.status import ConditionStatus
from multinode.api.timestamps import rfc3339
from multinode.reconcile.conditions import set_condition
from multinode.reconcile.observe import ObservedMirror, ObservedPod, PodPhase
from multinode.reconcile.startup import BLOCKING_WAITS, describe_wait


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
    if mirror.phase == PodPhase.FAILED or (mirror.phase == PodPhase.SUCCEEDED and not final_sync_done):
        return False, True
    return False, False


def report_mirror(job: TrainingJob, status: TrainingJobStatus, mirror: ObservedMirror | None, now: datetime) -> None:
    """The CheckpointMirror condition: the mirror pod runs, or what keeps it from running (in words that say
    what to change: its image is the operator's, set by the chart). Not written before the pod exists."""
    if job.spec.checkpointing is None or mirror is None or mirror.terminating:
        return
    state: ConditionStatus
    blocked = BLOCKING_WAITS.get(mirror.waiting.reason)
    if blocked is not None:
        state, reason, message = "False", blocked, f"{mirror.name}: {describe_wait(mirror.waiting)}"
    elif mirror.phase == PodPhase.RUNNING:
        state, reason, message = "True", Reason.MIRROR_RUNNING, f"{mirror.name} mirrors complete checkpoints"
    elif mirror.phase == PodPhase.PENDING:
        state, reason, message = "False", Reason.MIRROR_STARTING, f"{mirror.name} is starting"
    else:
        return  # Succeeded after its final sync, or Failed and about to be replaced: CheckpointsSynced says more
    set_condition(status.conditions, ConditionType.CHECKPOINT_MIRROR, state, reason, message, now=rfc3339(now),
                  generation=job.metadata.generation)
