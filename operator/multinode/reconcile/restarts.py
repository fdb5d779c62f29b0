"""Restart and backoff: what the failure policy does with an attempt's failure, and when the next attempt
may start.

A failure either fails the job (a FailJob rule, or no restarts left) or restarts the whole gang as the
next attempt, after an exponential backoff; BlockingRecreate also waits until the old pods are gone.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.health_check import HealthStatus
from multinode.api.lifecycle import FailureAction, RestartStrategy
from multinode.api.status import RestartRecord
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.failures import MAX_UNCOUNTED_RESTARTS, Failure, Ruling, restart_history_with, rule_on
from multinode.reconcile.in_place import replaces_one_pod
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import Event, Verdict


def backoff_seconds(job: TrainingJob, restarts_so_far: int) -> float:
    """Exponential: initial, 2×initial, 4×initial ... capped; restarts of either kind count toward it."""
    b = job.spec.failure_policy.backoff
    return float(min(b.max_seconds, b.initial_seconds * 2 ** max(0, restarts_so_far)))


def restart_budget_spent(job: TrainingJob, status: TrainingJobStatus, ruling: Ruling) -> bool:
    if ruling.action == FailureAction.RESTART:
        return status.restarts >= job.spec.failure_policy.max_restarts
    return status.uncounted_restarts >= MAX_UNCOUNTED_RESTARTS


def apply_failure_policy(job: TrainingJob, status: TrainingJobStatus, failure: Failure,
                         current: dict[int, ObservedPod], now: datetime) -> Decision:
    """The job's Failed verdict, or the gang restarting: its pods deleted, the next attempt due after the
    backoff (no verdict: the phase is Restarting)."""
    ruling = rule_on(job.spec.failure_policy, failure)
    if ruling.action == FailureAction.FAIL_JOB:
        return Decision(verdict=Verdict(Phase.FAILED, failure.reason, f"{failure.message} ({ruling.why}: FailJob)"))
    if restart_budget_spent(job, status, ruling):
        return Decision(verdict=Verdict(Phase.FAILED, Reason.RESTART_LIMIT_EXCEEDED,
                                        f"no restarts left (maxRestarts {job.spec.failure_policy.max_restarts}, "
                                        f"{status.restarts} used); last failure: {failure.message}"))
    one_pod = replaces_one_pod(job, failure, current)
    edits, message = restart_edits(job, status, failure, ruling, now, one_pod=one_pod)
    if failure.in_place or one_pod:
        replaced = current.get(failure.index) if failure.index is not None and not failure.in_place else None
        if replaced is not None and failure.node_loss:
            edits = forgive_collateral(status, edits, replaced)
        return _restart_in_place(status, edits, message, failure, replaced)
    # The next attempt waits for its backoff (and, blocking, for the old pods' deletion events).
    wait = max(0.0, (parse_time(edits["next_attempt_time"], now) - now).total_seconds())
    return Decision(status=edits, stop_creating=True, delete=tuple(p.name for p in current.values() if p.active),
                    events=(Event("Warning", Reason.RESTARTING, message),),
                    conditions=(SetCondition(ConditionType.RUNNING, "False", failure.reason, message),),
                    requeue_after=wait)


def _restart_in_place(status: TrainingJobStatus, edits: dict[str, Any], message: str, failure: Failure,
                      replaced: ObservedPod | None) -> Decision:
    """The next attempt at once, in the same pods (reconcile/in_place.py declares it into them): no backoff
    (the kubelet restarted the pod already) and the gang's scheduling and domain kept; a lost or unhealthy
    node's pod (`replaced`) goes, and a new one takes its place on another node."""
    edits = {**edits, "next_attempt_time": None, "pods_attempt": status.attempt_of_pods,
             "scheduling": status.scheduling, "topology_domain": status.topology_domain}
    gone = (replaced.name,) if replaced is not None and replaced.active else ()
    return Decision(status=edits, delete=gone, events=(Event("Warning", Reason.RESTARTING, message),),
                    conditions=(SetCondition(ConditionType.RUNNING, "False", failure.reason, message),))


def forgive_collateral(status: TrainingJobStatus, edits: dict[str, Any], lost: ObservedPod) -> dict[str, Any]:
    """A node lost during an in-place restart whose pod never came back into it: its peers' trainers most
    likely exited because it was dying (their collectives failed first; its kubelet said nothing), so the
    restart they caused is the node's loss too and is not counted against maxRestarts after all."""
    history = edits["restart_history"]
    if status.pods_attempt is None or len(history) < 2 or not history[-2].counted:
        return edits
    previous = history[-2]
    if previous.attempt != status.attempt - 1 or previous.reason != Reason.POD_FAILED:
        return edits
    if lost.in_place_attempt == status.attempt and lost.trainer_restarts >= lost.in_place_trainer_restarts:
        return edits  # it restarted into the attempt: whatever failed before, it was not this node's loss
    forgiven = previous.model_copy(update={"counted": False, "message": (
        f"{previous.message} (not counted: node {lost.index}'s pod never restarted into attempt {status.attempt}, "
        "and its node was lost)")[:4096]})
    return {**edits, "restart_history": [*history[:-2], forgiven, history[-1]],
            "restarts": max(0, edits["restarts"] - 1), "uncounted_restarts": edits["uncounted_restarts"] + 1}


def restart_edits(job: TrainingJob, status: TrainingJobStatus, failure: Failure, ruling: Ruling,
                  now: datetime, *, one_pod: bool = False) -> tuple[dict[str, Any], str]:
    """The status fields that move the job to the next attempt (phase Restarting), and the event message
    (`one_pod`: in place, the failure's pod replaced, in_place.replaces_one_pod)."""
    counted = ruling.action == FailureAction.RESTART
    previous_restarts = status.restarts + status.uncounted_restarts
    delay = backoff_seconds(job, previous_restarts)
    record = RestartRecord(attempt=status.attempt, reason=failure.reason, message=failure.message[:4096],
                           counted=counted, time=rfc3339(now), index=failure.index)
    restarts = status.restarts + counted
    attempt = status.attempt + 1
    edits = {"restart_history": restart_history_with(status, record), "restarts": restarts,
             "uncounted_restarts": status.uncounted_restarts + (not counted), "attempt": attempt,
             "phase": Phase.RESTARTING, "next_attempt_time": rfc3339(now + timedelta(seconds=delay)),
             **new_attempt(status)}
    budget = f"restart {restarts}/{job.spec.failure_policy.max_restarts}" if counted else "not counted"
    when = f"in {delay:.0f}s"
    if failure.in_place:
        when = "in place, in the same pods"
    elif one_pod:
        when = f"in place, node {failure.index}'s pod replaced on another node"
    return edits, (f"attempt {record.attempt} failed: {failure.message}; {budget} ({ruling.why}); "
                   f"attempt {attempt} {when}")


def new_attempt(status: TrainingJobStatus) -> dict[str, Any]:
    """The status fields to reset for a new attempt: what belonged to the previous one is forgotten, but for
    the nodes that failed their health check: their entries (naming the old pod and the verdict) say why the
    gang restarted until the index's new pod replaces them."""
    edits: dict[str, Any] = {
        "node_statuses": [ns for ns in status.node_statuses
                          if ns.health is not None and ns.health.status == HealthStatus.FAILED],
        "node_statuses_omitted": 0, "node_counts": None, "attempt_start_time": None,
        "attempt_scheduled_time": None, "resumed_from": None, "topology_domain": None, "ready_nodes": 0,
        "pods_attempt": None}
    if status.elastic is not None:  # a new attempt is the whole gang again: nothing shed (spec.elastic)
        edits["elastic"] = status.elastic.model_copy(update={"shed": [], "below_min_since": None,
                                                             "store_uid": None, "store_shared": None})
    if status.scheduling is not None:  # the mechanism is chosen again for the next attempt's pods
        edits["scheduling"] = status.scheduling.model_copy(update={"pod_group": None, "partial_since": None})
    return edits


def wait_for_next_attempt(job: TrainingJob, status: TrainingJobStatus, older: list[ObservedPod],
                          now: datetime) -> Decision:
    """A Restarting job: BlockingRecreate waits until the old attempt's pods are gone; both wait out the
    backoff. A verdict (still Restarting, and why) while it waits; else the next attempt may start."""
    # InPlace recreates (its fallback) as BlockingRecreate does; so does a job whose strategy is not chosen yet.
    blocking = job.spec.failure_policy.restart_strategy != RestartStrategy.RECREATE
    lingering = [p for p in older if p.active or p.terminating]
    if blocking and lingering:
        message = f"{len(lingering)} pods of earlier attempts are still terminating"
        return Decision(verdict=Verdict(Phase.RESTARTING, Reason.WAITING_FOR_OLD_PODS, message),
                        conditions=(SetCondition(ConditionType.RUNNING, "False", Reason.WAITING_FOR_OLD_PODS,
                                                 message),))
    if status.next_attempt_time:
        wait = (parse_time(status.next_attempt_time, now) - now).total_seconds()
        if wait > 0:
            message = f"attempt {status.attempt} starts at {status.next_attempt_time}"
            return Decision(verdict=Verdict(Phase.RESTARTING, Reason.BACKOFF, message),
                            conditions=(SetCondition(ConditionType.RUNNING, "False", Reason.BACKOFF, message),),
                            requeue_after=wait)
    return Decision(status={"next_attempt_time": None})
