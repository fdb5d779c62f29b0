"""Hang detection: an attempt whose ranks all stopped progressing for spec.hangDetection.timeoutSeconds fails
with reason Hung, and the failure policy decides (by default a counted gang restart, like any failure the
trainer's code or data can cause; a rule `onReasons: [Hung]` can make it uncounted or final).

The clock starts when every pod's trainer runs (the newest container start), so a gang that never forms
its world (every pod Running, no rank ever printing) is a hang too. A rank's silence is measured up to
when its log was last read (JobProgress.checked), never past it: a prober that stopped reading, or a log
that cannot be read, never makes a hang.
"""

from __future__ import annotations

from datetime import datetime

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.progress import MAX_RANKS_REPORTED, ProgressStatus, RankProgressStatus
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.failures import Failure
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.progress import JobProgress, RankProgress


def gang_started(current: dict[int, ObservedPod], num_nodes: int, now: datetime) -> datetime | None:
    """When the last trainer of the attempt started, once every pod runs (or has finished); else None."""
    if len(current) < num_nodes:
        return None
    starts = set()  # a gang's pods start within seconds of each other: few distinct times to parse
    for p in current.values():
        if p.phase == PodPhase.SUCCEEDED:
            continue
        if p.phase != PodPhase.RUNNING or p.terminating or p.started_at is None:
            return None
        starts.add(p.started_at)
    return max((parse_time(s, now) for s in starts), default=None)


def _describe(rank: RankProgress, started: datetime) -> str:
    node = f" on node {rank.node}" if rank.node else ""
    if rank.last_progress is None or rank.last_progress < started:
        return f"rank {rank.index}{node}: no progress since the gang started"
    step = f" (step {rank.step})" if rank.step is not None else ""
    return f"rank {rank.index}{node}: last progress {rfc3339(rank.last_progress)}{step}"


def judge_hang(job: TrainingJob, status: TrainingJobStatus, current: dict[int, ObservedPod],
               progress: JobProgress | None, now: datetime) -> Decision:
    """The failure Hung when no running rank progressed for the timeout, with the stalled ranks for
    status.progress and the Progressing condition; no decision otherwise."""
    spec = job.spec.hang_detection
    started = gang_started(current, job.spec.num_nodes, now)
    if spec is None or started is None or progress is None or progress.attempt != status.attempt:
        return Decision()
    if progress.checked is None:
        return Decision()
    running = {i for i, p in current.items() if p.phase == PodPhase.RUNNING}
    ranks = {r.index: r for r in progress.ranks if r.index in running}
    if not running or set(ranks) != running:
        return Decision()  # a rank's log was not read: no verdict on silence we did not observe

    def quiet_since(r: RankProgress) -> datetime:
        return max(r.last_progress, started) if r.last_progress is not None else started

    newest = max(quiet_since(r) for r in ranks.values())
    silent = (progress.checked - newest).total_seconds()
    if silent < spec.timeout_seconds:
        return Decision()
    stalled = sorted(ranks.values(), key=lambda r: (quiet_since(r), r.index))  # the first to stall first
    named = "; ".join(_describe(r, started) for r in stalled[:MAX_RANKS_REPORTED])
    more = f"; and {len(stalled) - MAX_RANKS_REPORTED} more" if len(stalled) > MAX_RANKS_REPORTED else ""
    source = progress.source.value.lower()
    message = (f"no rank progressed ({source}) for {silent:.0f}s (hangDetection.timeoutSeconds "
               f"{spec.timeout_seconds}): {named}{more}")
    report = (status.progress or ProgressStatus(attempt=status.attempt)).model_copy(update={
        "stalled_ranks": [RankProgressStatus(index=r.index, node=r.node, step=r.step, step_seconds=r.step_seconds,
                                             last_progress_time=rfc3339(r.last_progress) if r.last_progress else None)
                          for r in stalled[:MAX_RANKS_REPORTED]],
        "stalled_count": len(stalled)})
    return Decision(failure=Failure(Reason.HUNG, message, reasons=frozenset({Reason.HUNG})),
                    status={"progress": report},
                    conditions=(SetCondition(ConditionType.PROGRESSING, "False", Reason.HUNG, message),))
