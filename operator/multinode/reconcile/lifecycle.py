"""Suspend, deadline and TTL: the job-level timers and switches around the attempts, and what a finished
job keeps (spec.cleanPodPolicy)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.lifecycle import CleanPodPolicy
from multinode.api.timestamps import parse_time
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.observe import ObservedMirror, ObservedPod
from multinode.reconcile.outcome import Event, Verdict
from multinode.reconcile.restarts import new_attempt
from multinode.reconcile.status_report import node_table


def suspend(job: TrainingJob, status: TrainingJobStatus, current: Mapping[int, ObservedPod],
            why: str = "spec.suspend is true") -> Decision:
    """spec.suspend (or Kueue's not admitting the job, `why` says): nothing is created and the attempt's pods
    go; the verdict is Suspended."""
    verdict = Verdict(Phase.SUSPENDED, Reason.SUSPENDED, f"{why}; no pods run")
    n = job.spec.num_nodes
    return Decision(
        verdict=verdict, stop_creating=True, delete=tuple(p.name for p in current.values() if p.active),
        conditions=(SetCondition(ConditionType.SUSPENDED, "True", Reason.SUSPENDED, verdict.message),
                    SetCondition(ConditionType.RUNNING, "False", Reason.SUSPENDED, verdict.message)),
        status={**node_table(status, current, n), "ready_nodes": 0, "ready": f"0/{n}"})


def resume(status: TrainingJobStatus, current: Mapping[int, ObservedPod]) -> Decision:
    """Unsuspended: a job that had pods starts a new attempt (not counted); one created suspended starts."""
    ran = bool(current) or status.attempt_start_time is not None or any(ns.pod for ns in status.node_statuses)
    edits: dict[str, Any] = {"phase": Phase.PENDING, "next_attempt_time": None}
    attempt = status.attempt
    if ran:
        attempt += 1
        edits.update(attempt=attempt, uncounted_restarts=status.uncounted_restarts + 1, **new_attempt(status))
    return Decision(status=edits, events=(Event("Normal", Reason.RESUMED, f"resumed as attempt {attempt}"),),
                    delete=tuple(p.name for p in current.values() if p.active))


def _time_left(limit: int | None, since: str | None, now: datetime) -> tuple[bool, float | None]:
    """(passed, seconds left) for a limit counted from an RFC3339 time; (False, None) when either is unset."""
    if limit is None or since is None:
        return False, None
    left = limit - (now - parse_time(since, now)).total_seconds()
    return left <= 0, max(left, 0.0)


def deadline(job: TrainingJob, status: TrainingJobStatus, now: datetime) -> Decision:
    """spec.activeDeadlineSeconds, counted from startTime: the Failed verdict once it passed, else a timer."""
    exceeded, left = _time_left(job.spec.active_deadline_seconds, status.start_time, now)
    if exceeded:
        return Decision(verdict=Verdict(
            Phase.FAILED, Reason.DEADLINE_EXCEEDED,
            f"activeDeadlineSeconds ({job.spec.active_deadline_seconds}s) passed since {status.start_time}"))
    return Decision(requeue_after=left)


def clean_up_finished(job: TrainingJob, status: TrainingJobStatus, pods: list[ObservedPod],
                      mirror: ObservedMirror | None, now: datetime) -> Decision:
    """A finished job is never recreated: it cleans up, and goes when spec.ttlSecondsAfterFinished says so."""
    expired, left = _time_left(job.spec.ttl_seconds_after_finished, status.completion_time, now)
    return Decision(delete=tuple(finished_job_deletions(job, pods, mirror)), delete_job=expired,
                    requeue_after=None if expired else left)


def finished_job_deletions(job: TrainingJob, pods: list[ObservedPod], mirror: ObservedMirror | None) -> list[str]:
    """Pods a finished job deletes, by spec.cleanPodPolicy."""
    policy = job.spec.clean_pod_policy
    if policy == CleanPodPolicy.NONE:
        return []
    names = sorted(p.name for p in pods if policy == CleanPodPolicy.ALL or p.active)
    if mirror is not None and (mirror.active or policy == CleanPodPolicy.ALL) and not mirror.terminating:
        names.append(mirror.name)
    return [n for n in names if not any(p.name == n and p.terminating for p in pods)]
