"""Suspend, deadline and TTL: the job-level timers and switches around the attempts, and what a finished
job keeps (spec.cleanPodPolicy)."""

from __future__ import annotations

from datetime import datetime

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.lifecycle import CleanPodPolicy
from multinode.api.status import ConditionStatus
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.conditions import set_condition
from multinode.reconcile.observe import ObservedMirror, ObservedPod
from multinode.reconcile.outcome import Event, Plan, Verdict
from multinode.reconcile.restarts import new_attempt
from multinode.reconcile.status_report import change_phase, fill_node_statuses


def suspend(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus, current: dict[int, ObservedPod],
            result: Plan, now: datetime, why: str = "spec.suspend is true") -> Plan:
    """spec.suspend (or Kueue's not admitting the job, `why` says): nothing is created and the attempt's pods
    go."""
    result.pods_to_create = []
    result.delete(p.name for p in current.values() if p.active)
    verdict = Verdict(Phase.SUSPENDED, Reason.SUSPENDED, f"{why}; no pods run")
    conditions: tuple[tuple[str, ConditionStatus], ...] = (
        (ConditionType.SUSPENDED, "True"), (ConditionType.RUNNING, "False"))
    for type_, value in conditions:
        set_condition(status.conditions, type_, value, Reason.SUSPENDED, verdict.message, now=rfc3339(now),
                      generation=job.metadata.generation)
    fill_node_statuses(status, current, job.spec.num_nodes)
    status.ready_nodes, status.ready = 0, f"0/{job.spec.num_nodes}"
    change_phase(status, before, verdict, result)
    return result


def resume(status: TrainingJobStatus, current: dict[int, ObservedPod], result: Plan) -> None:
    """Unsuspended: a job that had pods starts a new attempt (not counted); one created suspended starts."""
    ran = bool(current) or status.attempt_start_time is not None or any(ns.pod for ns in status.node_statuses)
    status.phase = Phase.PENDING
    status.next_attempt_time = None
    if ran:
        status.attempt += 1
        status.uncounted_restarts += 1
        new_attempt(status)
    result.events.append(Event("Normal", Reason.RESUMED, f"resumed as attempt {status.attempt}"))
    result.delete(p.name for p in current.values() if p.active)


def _time_left(limit: int | None, since: str | None, now: datetime) -> tuple[bool, float | None]:
    """(passed, seconds left) for a limit counted from an RFC3339 time; (False, None) when either is unset."""
    if limit is None or since is None:
        return False, None
    left = limit - (now - parse_time(since, now)).total_seconds()
    return left <= 0, max(left, 0.0)


def deadline_verdict(job: TrainingJob, status: TrainingJobStatus, result: Plan, now: datetime) -> Verdict | None:
    """spec.activeDeadlineSeconds, counted from startTime: the Failed verdict once it passed, else a timer."""
    exceeded, left = _time_left(job.spec.active_deadline_seconds, status.start_time, now)
    if exceeded:
        return Verdict(Phase.FAILED, Reason.DEADLINE_EXCEEDED,
                       f"activeDeadlineSeconds ({job.spec.active_deadline_seconds}s) passed since {status.start_time}")
    result.come_back_in(left)
    return None


def clean_up_finished(job: TrainingJob, status: TrainingJobStatus, pods: list[ObservedPod],
                      mirror: ObservedMirror | None, result: Plan, now: datetime) -> Plan:
    """A finished job is never recreated: it cleans up, and goes when spec.ttlSecondsAfterFinished says so."""
    result.delete(finished_job_deletions(job, pods, mirror))
    expired, left = _time_left(job.spec.ttl_seconds_after_finished, status.completion_time, now)
    result.delete_job = expired
    result.come_back_in(None if expired else left)
    return result


def finished_job_deletions(job: TrainingJob, pods: list[ObservedPod], mirror: ObservedMirror | None) -> list[str]:
    """Pods a finished job deletes, by spec.cleanPodPolicy."""
    policy = job.spec.clean_pod_policy
    if policy == CleanPodPolicy.NONE:
        return []
    names = sorted(p.name for p in pods if policy == CleanPodPolicy.ALL or p.active)
    if mirror is not None and (mirror.active or policy == CleanPodPolicy.ALL) and not mirror.terminating:
        names.append(mirror.name)
    return [n for n in names if not any(p.name == n and p.terminating for p in pods)]
