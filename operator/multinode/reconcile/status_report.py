"""How a verdict shows in the status: the conditions, the per-node table, the phase and its Event, and a
failed job's status (also written by the controller when the apiserver refuses a pod or the spec)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from multinode.api import NodeCounts, NodeStatus, Phase, TrainingJobStatus
from multinode.api.base import deep_copied
from multinode.api.status import MAX_NODE_STATUSES, TERMINAL_PHASES
from multinode.api.conditions import ConditionType, Reason
from multinode.api.health_check import HealthStatus, NodeHealth
from multinode.api.timestamps import rfc3339
from multinode.reconcile.conditions import set_condition
from multinode.reconcile.kstatus import mark_kstatus
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.outcome import Event, Plan, Verdict


def verdict_conditions(status: TrainingJobStatus, verdict: Verdict, *, created: int,
                       num_nodes: int) -> tuple[SetCondition, ...]:
    """The conditions that show `verdict`: Created, Running, Suspended (once it was set), Succeeded, Failed."""
    def put(type_: str, ok: bool, reason: str, message: str) -> SetCondition:
        return SetCondition(type_, "True" if ok else "False", reason, message)

    all_created = created == num_nodes or verdict.phase in TERMINAL_PHASES
    out = [put(ConditionType.CREATED, all_created, Reason.PODS_CREATED if all_created else Reason.CREATING_PODS,
               f"{created}/{num_nodes} pods created")]
    if verdict.phase == Phase.RUNNING:  # an elastic job below minNodes is Running, but does not train
        out.append(put(ConditionType.RUNNING, verdict.reason != Reason.BELOW_MIN_NODES, verdict.reason,
                       verdict.message))
    elif verdict.phase in TERMINAL_PHASES:
        out.append(put(ConditionType.RUNNING, False, Reason.JOB_FINISHED, f"job {verdict.phase.value.lower()}"))
    else:
        out.append(put(ConditionType.RUNNING, False, verdict.reason, verdict.message))
    if any(c.type == ConditionType.SUSPENDED for c in status.conditions):
        out.append(put(ConditionType.SUSPENDED, False, Reason.RESUMED, "spec.suspend is false"))
    if verdict.phase == Phase.SUCCEEDED:
        out.append(put(ConditionType.SUCCEEDED, True, verdict.reason, verdict.message))
    if verdict.phase == Phase.FAILED:
        out.append(put(ConditionType.FAILED, True, verdict.reason, verdict.message))
    return tuple(out)


def phase_change(before: TrainingJobStatus, verdict: Verdict) -> Decision:
    """The phase `verdict` gives, and its Event, when it differs from the last status' phase."""
    if verdict.phase == before.phase:
        return Decision()
    return Decision(status={"phase": verdict.phase},
                    events=(Event("Warning" if verdict.phase == Phase.FAILED else "Normal", verdict.reason,
                                  verdict.message),))


def _row_health(health: NodeHealth | None) -> NodeHealth | None:
    # A passed verdict's words would repeat the request on every row: the row keeps them only when the check
    # failed. Its figures (the collective bandwidth test's) stay either way.
    if health is None or health.status == HealthStatus.FAILED or health.message is None:
        return health
    return health.model_copy(update={"message": None})


def _row(p: ObservedPod) -> NodeStatus:
    return NodeStatus(index=p.index, pod=p.name, node=p.node, phase=p.phase,
                      reason=p.disruption or p.reason or p.waiting_reason, exit_code=p.exit_code,
                      health=_row_health(p.health))


def _trouble(p: ObservedPod) -> bool:
    """Failed, unhealthy, or with something to say (a reason, a non-zero exit code): listed first."""
    return (p.phase == PodPhase.FAILED or p.unhealthy or p.exit_code not in (None, 0)
            or bool(p.disruption or p.reason or p.waiting_reason))


_COUNTED_PHASES = {PodPhase.PENDING: "pending", PodPhase.RUNNING: "running", PodPhase.SUCCEEDED: "succeeded",
                   PodPhase.FAILED: "failed"}


def node_table(status: TrainingJobStatus, current: Mapping[int, ObservedPod], num_nodes: int) -> dict[str, Any]:
    """The status fields of the node table: nodeCounts counts every node; nodeStatuses lists at most
    MAX_NODE_STATUSES rows, in index order, chosen troubled first (failed, unhealthy, with a reason; and
    vanished pods, whose last row explains a NodeLost restart), then waiting (pending, unknown, no pod yet),
    then fine. One pass over the nodes; rows are built only for the nodes listed, so a 20 000-node job costs
    no 20 000 models."""
    previous = {ns.index: ns for ns in status.node_statuses}
    troubled: list[int] = []
    waiting: list[int] = []
    fine: list[int] = []
    counts = dict.fromkeys(("no_pod", "pending", "running", "succeeded", "failed", "unknown"), 0)
    ready = 0
    for i in range(num_nodes):
        p = current.get(i)
        if p is None:
            counts["no_pod"] += 1
            # Keep what we last saw of a vanished pod: it explains a NodeLost restart.
            (troubled if i in previous and previous[i].pod else waiting).append(i)
            continue
        counts[_COUNTED_PHASES.get(p.phase, "unknown")] += 1
        ready += p.phase == PodPhase.RUNNING and p.ready
        if _trouble(p):
            troubled.append(i)
        elif p.phase in (PodPhase.RUNNING, PodPhase.SUCCEEDED):
            fine.append(i)
        else:
            waiting.append(i)
    chosen = troubled[:MAX_NODE_STATUSES]
    for group in (waiting, fine):
        chosen += group[:MAX_NODE_STATUSES - len(chosen)]
    rows = []
    for i in sorted(chosen):
        p = current.get(i)
        rows.append(_row(p) if p is not None else previous.get(i) or NodeStatus(index=i))
    return {"node_statuses": rows, "node_statuses_omitted": num_nodes - len(rows),
            "node_counts": NodeCounts(**counts, not_fine=len(troubled) + len(waiting)), "ready_nodes": ready,
            "ready": f"{ready}/{num_nodes}"}


def fail_job(result: Plan, reason: str, message: str, *, now: datetime, pods: Iterable[ObservedPod]) -> Plan:
    """Turn a plan into the job's failure: nothing more is created, active pods go, the status says why.

    Pods created moments ago may not be observed yet; the next reconcile sees them and, the job being
    terminal, deletes them.
    """
    status = deep_copied(result.status)  # `result` stays as it was
    attempt = status.attempt_of_pods
    mark_failed(status, reason, message, now=now)
    events = [*result.events, Event("Warning", reason, message)]
    to_delete = sorted(p.name for p in pods if p.attempt == attempt and p.active)
    return Plan(pods_to_delete=to_delete, status=status, events=events)


def mark_failed(status: TrainingJobStatus, reason: str, message: str, *, now: datetime,
                generation: int | None = None) -> None:
    status.phase = Phase.FAILED
    status.completion_time = status.completion_time or rfc3339(now)
    set_condition(status.conditions, ConditionType.RUNNING, "False", Reason.JOB_FINISHED, "job failed",
                  now=rfc3339(now), generation=generation)
    set_condition(status.conditions, ConditionType.FAILED, "True", reason, message, now=rfc3339(now),
                  generation=generation)
    mark_kstatus(status, now=now, generation=generation)
