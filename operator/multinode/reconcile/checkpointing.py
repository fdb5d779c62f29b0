"""Checkpoint decisions of the planner: where an attempt resumes from, keeping the mirror alive (replaced
when it fails, or when its node stops answering), and which of the job's checkpoints other jobs resumed
from. (Holding a finished job open for the mirror's final sync is final_sync.py.)"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.checkpointing import MAX_RESUMED_BY, ResumedByStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.status import ConditionStatus
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.node_loss import GONE, NodeDown, seconds_left
from multinode.reconcile.observe import ObservedMirror, ObservedPod, PodPhase
from multinode.reconcile.outcome import Event
from multinode.reconcile.startup import BLOCKING_WAITS, describe_wait
from multinode.render.storage import job_mirror_dir
from multinode.render.tolerations import mirror_tolerations


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


def report_mirror(job: TrainingJob, mirror: ObservedMirror | None) -> Decision:
    """The CheckpointMirror condition: the mirror pod runs, or what keeps it from running (in words that say
    what to change: its image is the operator's, set by the chart). Not written before the pod exists."""
    if job.spec.checkpointing is None or mirror is None or mirror.terminating:
        return Decision()
    state: ConditionStatus
    blocked = BLOCKING_WAITS.get(mirror.waiting.reason)
    if blocked is not None:
        state, reason, message = "False", blocked, f"{mirror.name}: {describe_wait(mirror.waiting)}"
    elif mirror.phase == PodPhase.RUNNING:
        state, reason, message = "True", Reason.MIRROR_RUNNING, f"{mirror.name} mirrors complete checkpoints"
    elif mirror.phase == PodPhase.PENDING:
        state, reason, message = "False", Reason.MIRROR_STARTING, f"{mirror.name} is starting"
    else:  # Succeeded after its final sync, or Failed and about to be replaced: CheckpointsSynced says more
        return Decision()
    return Decision(conditions=(SetCondition(ConditionType.CHECKPOINT_MIRROR, state, reason, message),))


def mirror_on_lost_node(job: TrainingJob, mirror: ObservedMirror | None, down: Mapping[str, NodeDown],
                        now: datetime) -> Decision:
    """Force-delete the mirror pod when its node has been down longer than the mirror tolerates (its own
    node-loss tolerations come first: render/tolerations.mirror_tolerations), is gone, or when the pod is
    already being deleted there: only that node's kubelet would confirm a graceful deletion, so without
    this no mirror would copy until the node came back. The next pass creates a new one (mirror_needs).
    The decision force-deletes it; for a node still within the toleration, it is a timer for when it runs out."""
    node = down.get(mirror.node or "") if mirror is not None else None
    if mirror is None or node is None or (mirror.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)
                                          and not mirror.terminating):
        return Decision()   # a mirror that exited holds nothing up (a failed one is deleted, then forced if stuck)
    if node.status != GONE and not mirror.terminating:
        left = seconds_left(mirror_tolerations(job), node, now)
        if left is None:
            return Decision()
        if left > 0:
            return Decision(requeue_after=left)
    return Decision(force_delete=(mirror.name,), events=(Event(
        "Warning", Reason.POD_FORCE_DELETED,
        f"mirror pod {mirror.name} is on node {mirror.node}, which {node.words}: "
        "deleted without waiting for its kubelet; a new mirror starts elsewhere"),))


@dataclass(frozen=True)
class Resumer:
    """Another job of the namespace whose spec.checkpointing.resumeFrom.trainingJob names this one."""

    name: str
    finished: bool                 # Succeeded or Failed: its attempts read nothing any more
    resumed_from: str | None       # its status.resumedFrom


def resumed_by(job: TrainingJob, resumers: Iterable[Resumer]) -> list[ResumedByStatus]:
    """This job's mirrored checkpoints that a running attempt of another job resumed from, one entry per
    checkpoint (the first job by name), at most MAX_RESUMED_BY: status.resumedBy, which the mirror pins."""
    mirror_dir = job_mirror_dir(job)
    if mirror_dir is None:
        return []
    paths: dict[str, str] = {}
    for resumer in sorted(resumers, key=lambda r: r.name):
        path = resumer.resumed_from
        if resumer.finished or not path or posixpath.dirname(path.rstrip("/")) != mirror_dir.rstrip("/"):
            continue   # another attempt resumes from its own checkpoints, or from somewhere else
        paths.setdefault(path, resumer.name)
    return [ResumedByStatus(path=path, training_job=name) for path, name in sorted(paths.items())][:MAX_RESUMED_BY]
