"""Restart and backoff: what the failure policy does with an attempt's failure, and when the next attempt
may start.

A failure either fails the job (a FailJob rule, or no restarts left) or restarts the whole gang as the
next attempt, after an exponential backoff; BlockingRecreate also waits until the old pods are gone.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.health_check import HealthStatus
from multinode.api.lifecycle import FailureAction, RestartStrategy
from multinode.api.status import RestartRecord
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.conditions import set_condition
from multinode.reconcile.failures import MAX_UNCOUNTED_RESTARTS, Decision, Failure, decide
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import Event, Plan, Verdict

RESTART_HISTORY = 10


def backoff_seconds(job: TrainingJob, restarts_so_far: int) -> float:
    """Exponential: initial, 2×initial, 4×initial ... capped; restarts of either kind count toward it."""
    b = job.spec.failure_policy.backoff
    return float(min(b.max_seconds, b.initial_seconds * 2 ** max(0, restarts_so_far)))


def restart_budget_spent(job: TrainingJob, status: TrainingJobStatus, decision: Decision) -> bool:
    if decision.action == FailureAction.RESTART:
        return status.restarts >= job.spec.failure_policy.max_restarts
    return status.uncounted_restarts >= MAX_UNCOUNTED_RESTARTS


def apply_failure_policy(job: TrainingJob, status: TrainingJobStatus, failure: Failure,
                         current: dict[int, ObservedPod], result: Plan, now: datetime) -> Verdict | None:
    """The job's Failed verdict, or None once the gang is restarting (its pods deleted, the next attempt due)."""
    decision = decide(job.spec.failure_policy, failure)
    if decision.action == FailureAction.FAIL_JOB:
        return Verdict(Phase.FAILED, failure.reason, f"{failure.message} ({decision.why}: FailJob)")
    if restart_budget_spent(job, status, decision):
        return Verdict(Phase.FAILED, Reason.RESTART_LIMIT_EXCEEDED,
                       f"no restarts left (maxRestarts {job.spec.failure_policy.max_restarts}, "
                       f"{status.restarts} used); last failure: {failure.message}")
    message = begin_restart(job, status, failure, decision, now)
    result.pods_to_create = []
    result.delete(p.name for p in current.values() if p.active)
    result.events.append(Event("Warning", Reason.RESTARTING, message))
    set_condition(status.conditions, ConditionType.RUNNING, "False", failure.reason, message, now=rfc3339(now),
                  generation=job.metadata.generation)
    # The next attempt waits for its backoff (and, blocking, for the old pods' deletion events).
    assert status.next_attempt_time is not None, "begin_restart sets it"
    result.come_back_in(max(0.0, (parse_time(status.next_attempt_time, now) - now).total_seconds()))
    return None


def record_restart(status: TrainingJobStatus, record: RestartRecord) -> None:
    """Add to status.restartHistory, which keeps the newest RESTART_HISTORY entries."""
    status.restart_history = [*status.restart_history, record][-RESTART_HISTORY:]


def begin_restart(job: TrainingJob, status: TrainingJobStatus, failure: Failure, decision: Decision,
                  now: datetime) -> str:
    """Move the job to the next attempt (phase Restarting); returns the event message."""
    counted = decision.action == FailureAction.RESTART
    previous_restarts = status.restarts + status.uncounted_restarts
    delay = backoff_seconds(job, previous_restarts)
    record = RestartRecord(attempt=status.attempt, reason=failure.reason, message=failure.message[:4096],
                           counted=counted, time=rfc3339(now))
    record_restart(status, record)
    if counted:
        status.restarts += 1
    else:
        status.uncounted_restarts += 1
    status.attempt += 1
    status.phase = Phase.RESTARTING
    status.next_attempt_time = rfc3339(now + timedelta(seconds=delay))
    new_attempt(status)
    budget = f"restart {status.restarts}/{job.spec.failure_policy.max_restarts}" if counted else "not counted"
    return (f"attempt {record.attempt} failed: {failure.message}; {budget} ({decision.why}); "
            f"attempt {status.attempt} in {delay:.0f}s")


def new_attempt(status: TrainingJobStatus) -> None:
    """Forget what belonged to the previous attempt, but for the nodes that failed their health check: their
    entries (naming the old pod and the verdict) say why the gang restarted until the index's new pod
    replaces them."""
    status.node_statuses = [ns for ns in status.node_statuses
                            if ns.health is not None and ns.health.status == HealthStatus.FAILED]
    status.node_statuses_omitted = 0
    status.node_counts = None
    status.attempt_start_time = None
    status.attempt_scheduled_time = None
    status.resumed_from = None
    status.topology_domain = None
    status.ready_nodes = 0
    if status.scheduling is not None:  # the mechanism is chosen again for the next attempt's pods
        status.scheduling.pod_group = None
        status.scheduling.partial_since = None


def ready_for_next_attempt(job: TrainingJob, status: TrainingJobStatus, older: list[ObservedPod], result: Plan,
                           now: datetime) -> bool:
    """BlockingRecreate waits until the old attempt's pods are gone; both wait out the backoff."""
    blocking = job.spec.failure_policy.restart_strategy == RestartStrategy.BLOCKING_RECREATE
    lingering = [p for p in older if p.active or p.terminating]
    if blocking and lingering:
        set_condition(status.conditions, ConditionType.RUNNING, "False", Reason.WAITING_FOR_OLD_PODS,
                      f"{len(lingering)} pods of earlier attempts are still terminating", now=rfc3339(now),
                      generation=job.metadata.generation)
        return False
    if status.next_attempt_time:
        wait = (parse_time(status.next_attempt_time, now) - now).total_seconds()
        if wait > 0:
            set_condition(status.conditions, ConditionType.RUNNING, "False", Reason.BACKOFF,
                          f"attempt {status.attempt} starts at {status.next_attempt_time}", now=rfc3339(now),
                          generation=job.metadata.generation)
            result.come_back_in(wait)
            return False
    status.next_attempt_time = None
    return True
