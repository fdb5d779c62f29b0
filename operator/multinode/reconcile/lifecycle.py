"""Lifecycle steps of the planner: restarts with backoff, suspend and resume, deadlines, TTL, cleanup."""

from __future__ import annotations

from datetime import datetime, timedelta

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.lifecycle import CleanPodPolicy, FailureAction
from multinode.api.status import RestartRecord
from multinode.reconcile.failures import Decision, Failure
from multinode.reconcile.observe import ObservedMirror, ObservedPod

RESTART_HISTORY = 10
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(now: datetime) -> str:
    return now.strftime(TIME_FORMAT)


def parse_time(value: str, like: datetime) -> datetime:
    return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=like.tzinfo)


def backoff_seconds(job: TrainingJob, restarts_so_far: int) -> float:
    """Exponential: initial, 2×initial, 4×initial ... capped; restarts of either kind count toward it."""
    b = job.spec.failure_policy.backoff
    return float(min(b.max_seconds, b.initial_seconds * 2 ** max(0, restarts_so_far)))


def begin_restart(job: TrainingJob, status: TrainingJobStatus, failure: Failure, decision: Decision,
                  now: datetime) -> str:
    """Move the job to the next attempt (phase Restarting); returns the event message."""
    counted = decision.action == FailureAction.RESTART
    previous_restarts = status.restarts + status.uncounted_restarts
    delay = backoff_seconds(job, previous_restarts)
    record = RestartRecord(attempt=status.attempt, reason=failure.reason, message=failure.message[:4096],
                           counted=counted, time=rfc3339(now))
    status.restart_history = [*status.restart_history, record][-RESTART_HISTORY:]
    if counted:
        status.restarts += 1
    else:
        status.uncounted_restarts += 1
    status.attempt += 1
    status.phase = Phase.RESTARTING
    status.next_attempt_time = rfc3339(now + timedelta(seconds=delay))
    _new_attempt(status)
    budget = f"restart {status.restarts}/{job.spec.failure_policy.max_restarts}" if counted else "not counted"
    return (f"attempt {record.attempt} failed: {failure.message}; {budget} ({decision.why}); "
            f"attempt {status.attempt} in {delay:.0f}s")


def resume_after_suspend(status: TrainingJobStatus, ran: bool) -> None:
    """Unsuspended: a job that had pods starts a new attempt (not counted); one created suspended starts."""
    status.phase = Phase.PENDING
    status.next_attempt_time = None
    if ran:
        status.attempt += 1
        status.uncounted_restarts += 1
        _new_attempt(status)


def _new_attempt(status: TrainingJobStatus) -> None:
    status.node_statuses = []
    status.attempt_start_time = None
    status.resumed_from = None
    status.topology_domain = None
    status.ready_nodes = 0


def restart_budget_spent(job: TrainingJob, status: TrainingJobStatus, decision: Decision) -> bool:
    from multinode.reconcile.failures import MAX_UNCOUNTED_RESTARTS

    if decision.action == FailureAction.RESTART:
        return status.restarts >= job.spec.failure_policy.max_restarts
    return status.uncounted_restarts >= MAX_UNCOUNTED_RESTARTS


def _time_left(limit: int | None, since: str | None, now: datetime) -> tuple[bool, float | None]:
    """(passed, seconds left) for a limit counted from an RFC3339 time; (False, None) when either is unset."""
    if limit is None or since is None:
        return False, None
    left = limit - (now - parse_time(since, now)).total_seconds()
    return left <= 0, max(left, 0.0)


def deadline_exceeded(job: TrainingJob, status: TrainingJobStatus, now: datetime) -> tuple[bool, float | None]:
    """spec.activeDeadlineSeconds, counted from startTime."""
    return _time_left(job.spec.active_deadline_seconds, status.start_time, now)


def ttl_expired(job: TrainingJob, status: TrainingJobStatus, now: datetime) -> tuple[bool, float | None]:
    """spec.ttlSecondsAfterFinished, counted from completionTime."""
    return _time_left(job.spec.ttl_seconds_after_finished, status.completion_time, now)


def finished_job_deletions(job: TrainingJob, pods: list[ObservedPod], mirror: ObservedMirror | None) -> list[str]:
    """Pods a finished job deletes, by spec.cleanPodPolicy."""
    policy = job.spec.clean_pod_policy
    if policy == CleanPodPolicy.NONE:
        return []
    names = sorted(p.name for p in pods if policy == CleanPodPolicy.ALL or p.active)
    if mirror is not None and (mirror.active or policy == CleanPodPolicy.ALL) and not mirror.terminating:
        names.append(mirror.name)
    return [n for n in names if not any(p.name == n and p.terminating for p in pods)]
