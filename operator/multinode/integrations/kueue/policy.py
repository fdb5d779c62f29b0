"""Kueue: the operator is the TrainingJob's Kueue integration, what Kueue's jobframework is for the kinds it
knows (Kueue ships none for TrainingJob; listing it in Kueue's `integrations.externalFrameworks` says an
outside controller plays that part).

A job with the label kueue.x-k8s.io/queue-name is managed through its Workload (workload.py):

- the operator creates the Workload (one per job, owned by it) while the job is not finished, and recreates it
  when numNodes changed while it waited (the old one does not describe the job any more);
- not admitted: the job is held suspended (no pod). A job created with suspend false is suspended, as
  jobframework does, so no pod runs outside the queue's quota;
- admitted (status.admission set and condition Admitted True): the operator sets spec.suspend false, and the
  next pass starts the attempt (reconcile/lifecycle.py) with the nodeLabels of the flavors Kueue assigned as
  node selectors of the pods;
- evicted or preempted (condition Evicted True, or the admission gone) while running: spec.suspend true again;
  the pods go, a restart that does not count (reason EvictedByKueue) is recorded, and once no pod holds
  anything the Workload's admission is cleared, as jobframework does, so Kueue requeues it;
- finished: the Workload's Finished condition (reason Succeeded or Failed), which releases its quota.

The KueueAdmitted condition says where the job stands (QueuedInKueue, AdmittedByKueue, EvictedByKueue,
KueueNotInstalled). Pure: the controller observes the Workload and the ResourceFlavors (integration.py says
what it watches) and applies the plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from multinode.api import LABEL_JOB_NAME, Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.constants import (KUEUE_API_GROUP, KUEUE_API_VERSION, KUEUE_FLAVOR_PLURAL, KUEUE_POD_SET,
                                     KUEUE_WORKLOAD_KIND, KUEUE_WORKLOAD_PLURAL, LABEL_KUEUE_QUEUE_NAME)
from multinode.api.status import RestartRecord
from multinode.api.timestamps import rfc3339
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.kinds import ApiKind, StatusWrite
from multinode.reconcile.ownership import controller_uid
from multinode.reconcile.failures import restart_history_with

WORKLOAD = ApiKind(KUEUE_API_GROUP, KUEUE_API_VERSION, KUEUE_WORKLOAD_KIND, KUEUE_WORKLOAD_PLURAL)
RESOURCE_FLAVOR = ApiKind(KUEUE_API_GROUP, KUEUE_API_VERSION, "ResourceFlavor", KUEUE_FLAVOR_PLURAL)
# Kueue's evictions after which jobframework sets the Workload's Requeued condition True (back in the queue
# at once); after the others (a stopped queue, an admission check) it is False until Kueue says otherwise.
_REQUEUED_AT_ONCE = (Reason.PREEMPTED.value, "NodeFailures")  # Kueue spells Preempted as we do
# How soon to look again for a ResourceFlavor of the admission that the flavor index does not hold yet.
FLAVOR_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class ObservedWorkload:
    """What planning needs of a job's Workload."""

    name: str
    job_name: str
    resource_version: str
    count: int | None
    admitted: bool
    # status.admission: the ClusterQueue, and the flavors assigned to the `node` podSet.
    cluster_queue: str | None = None
    flavors: tuple[str, ...] = ()
    # Evicted True: (reason, message).
    evicted: tuple[str, str] | None = None
    finished: bool = False
    # Why it waits (the QuotaReserved condition's message when False).
    waiting: str = ""
    terminating: bool = False
    # status.conditions as stored, for the status writes that add to them.
    conditions: tuple[Mapping[str, Any], ...] = ()
    owner_uid: str | None = None  # the TrainingJob controlling it (reconcile/ownership.py)


def observe_workload(body: Mapping[str, Any]) -> ObservedWorkload | None:
    """Project a raw Workload onto what planning needs; None for Workloads without the job's label."""
    meta = body.get("metadata") or {}
    job = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
    if not job:
        return None
    spec, status = body.get("spec") or {}, body.get("status") or {}
    conditions = tuple(status.get("conditions") or ())
    by_type = {c.get("type"): c for c in conditions}
    admission = status.get("admission") or None
    pod_set: Mapping[str, Any] = next((p for p in spec.get("podSets") or () if p.get("name") == KUEUE_POD_SET), {})
    assignment: Mapping[str, Any] = next((a for a in (admission or {}).get("podSetAssignments") or ()
                       if a.get("name") == KUEUE_POD_SET), {})
    evicted = by_type.get("Evicted") or {}
    quota = by_type.get("QuotaReserved") or {}
    return ObservedWorkload(
        name=meta.get("name", ""), job_name=job, resource_version=meta.get("resourceVersion", ""),
        count=pod_set.get("count"),
        admitted=admission is not None and (by_type.get("Admitted") or {}).get("status") == "True",
        cluster_queue=(admission or {}).get("clusterQueue"),
        flavors=tuple(sorted(set((assignment.get("flavors") or {}).values()))),
        evicted=(evicted.get("reason", ""), evicted.get("message", "")) if evicted.get("status") == "True" else None,
        finished=(by_type.get("Finished") or {}).get("status") == "True",
        waiting=quota.get("message", "") if quota.get("status") == "False" else "",
        terminating=meta.get("deletionTimestamp") is not None,
        conditions=conditions, owner_uid=controller_uid(meta))


def observe_flavor(body: Mapping[str, Any]) -> Mapping[str, str]:
    """A ResourceFlavor's spec.nodeLabels: what pods admitted on it must select."""
    return dict((body.get("spec") or {}).get("nodeLabels") or {})


def queue_name(job: TrainingJob) -> str | None:
    """The LocalQueue the job is queued in (label kueue.x-k8s.io/queue-name), if any."""
    return (job.metadata.labels or {}).get(LABEL_KUEUE_QUEUE_NAME) or None


@dataclass
class KueueGate:
    """What the job's Kueue integration decides this pass."""

    # The job must not run now (no admission): it is planned as suspended.
    hold: bool = False
    # spec.suspend to write (True: stop, False: start), None for no change.
    set_suspend: bool | None = None
    # Node selectors from the admitted flavors' nodeLabels, for the attempt's pods.
    node_selector: dict[str, str] = field(default_factory=dict)
    # The flavors are not all known yet: wait before creating pods.
    flavors_pending: bool = False
    # Create the job's Workload; delete the one named (it no longer describes the job); write its status.
    create_workload: bool = False
    delete_workload: str | None = None
    workload_status: StatusWrite | None = None


def _condition(conditions: Iterable[Mapping[str, Any]], type_: str, status: str, reason: str, message: str,
               now: str) -> list[dict[str, Any]]:
    """Kueue's conditions with one set (lastTransitionTime kept when the status does not change)."""
    out = [dict(c) for c in conditions]
    old = next((c for c in out if c.get("type") == type_), None)
    new = {**(old or {}), "type": type_, "status": status, "reason": reason, "message": message[:32768],
           "lastTransitionTime": old.get("lastTransitionTime") if old and old.get("status") == status else now}
    return [new if c is old else c for c in out] if old is not None else [*out, new]


def finish_workload(job: TrainingJob, status: TrainingJobStatus, workload: ObservedWorkload | None,
                    now: datetime) -> StatusWrite | None:
    """A finished job's Workload gets Finished True (Succeeded or Failed), which frees its quota."""
    if queue_name(job) is None or workload is None or workload.finished or workload.terminating:
        return None
    succeeded = status.phase == Phase.SUCCEEDED
    reason = "Succeeded" if succeeded else "Failed"
    message = f"TrainingJob {'succeeded' if succeeded else 'failed'}"
    done = next((c for c in status.conditions if c.type in (ConditionType.SUCCEEDED, ConditionType.FAILED)
                 and c.status == "True"), None)
    if done is not None and done.message:
        message = done.message
    conditions = _condition(workload.conditions, "Finished", "True", reason, message, rfc3339(now))
    return StatusWrite(WORKLOAD, workload.name, workload.resource_version, {"conditions": conditions})


def _holding_pods(pods: Iterable[ObservedPod]) -> bool:
    """Whether a pod of the job may still hold a node's resources (terminating ones too)."""
    return any(p.phase not in (PodPhase.SUCCEEDED, PodPhase.FAILED) for p in pods)


def clear_admission(workload: ObservedWorkload, now: datetime) -> StatusWrite:
    """After an eviction, once the job's pods are gone: the admission goes (QuotaReserved and Admitted False,
    Requeued), as jobframework does; Kueue then queues the Workload again."""
    reason, message = workload.evicted or ("Pending", "the admission was removed")
    stamp = rfc3339(now)
    conditions = _condition(workload.conditions, "Requeued", "True" if reason in _REQUEUED_AT_ONCE else "False",
                            reason, message, stamp)
    conditions = _condition(conditions, "QuotaReserved", "False", "Pending", message, stamp)
    conditions = _condition(conditions, "Admitted", "False", "NoReservation", "The workload has no reservation",
                            stamp)
    return StatusWrite(WORKLOAD, workload.name, workload.resource_version,
                               {"admission": None, "conditions": conditions})


def _admitted(ok: bool, reason: str, message: str) -> SetCondition:
    return SetCondition(ConditionType.KUEUE_ADMITTED, "True" if ok else "False", reason, message)


def kueue_gate(job: TrainingJob, status: TrainingJobStatus, workload: ObservedWorkload | None, *,
               served: bool, flavors: Mapping[str, Mapping[str, str]], pods: Iterable[ObservedPod],
               now: datetime) -> tuple[KueueGate | None, Decision]:
    """The Kueue integration's gate for a job that is not finished, None when the job is not queued in Kueue
    (or Kueue is not served), and what it sets in the status (the KueueAdmitted condition; an eviction's
    restart record). `flavors`: the nodeLabels of every ResourceFlavor, by name; `pods`: the job's pods, of
    every attempt."""
    queue = queue_name(job)
    if queue is None:
        return None, Decision()
    gate = KueueGate()
    pods = list(pods)
    if not served:
        return None, Decision(conditions=(_admitted(
            False, Reason.KUEUE_NOT_INSTALLED,
            f"label {LABEL_KUEUE_QUEUE_NAME}={queue}, but the apiserver serves no {WORKLOAD.api_version} "
            "Workload (is Kueue installed? the operator looks at start); the job is not started by Kueue"),))
    if workload is not None and workload.terminating:
        gate.hold = True
        return _hold(gate, f"Workload {workload.name} is being deleted; a new one follows")
    if workload is None:
        gate.create_workload = True
        gate.hold = True
        return _hold(gate, f"creating Workload for LocalQueue {queue}")
    if not workload.admitted and workload.count != job.spec.num_nodes:
        gate.delete_workload = workload.name  # it no longer describes the job; the next pass makes a new one
        gate.hold = True
        return _hold(gate, f"numNodes changed: Workload {workload.name} is replaced")

    if workload.admitted and workload.evicted is None:
        selector: dict[str, str] = {}
        for name in workload.flavors:
            labels = flavors.get(name)
            if labels is None:
                gate.flavors_pending = True
                continue
            selector.update(labels)
        gate.node_selector = selector
        on = f" on flavor {', '.join(workload.flavors)}" if workload.flavors else ""
        if job.spec.suspend:
            gate.set_suspend = False  # the next pass (its watch event) starts the attempt
            gate.hold = True
        return gate, Decision(conditions=(_admitted(
            True, Reason.ADMITTED_BY_KUEUE,
            f"Workload {workload.name} admitted by ClusterQueue {workload.cluster_queue}{on}"),))

    # Not admitted (never yet, or evicted): the job must not run.
    gate.hold = True
    if not job.spec.suspend:
        gate.set_suspend = True
    # This pass stops an attempt that ran: a restart that does not count, with Kueue's reason.
    ran = status.attempt_start_time is not None or any(p.attempt == status.attempt_of_pods for p in pods)
    stops_attempt = status.phase not in (None, Phase.SUSPENDED) and ran
    if workload.evicted is None and not stops_attempt:
        waiting = f": {workload.waiting}" if workload.waiting else ""
        return _hold(gate, f"Workload {workload.name} waits in LocalQueue {queue}{waiting}")
    why, detail = workload.evicted or ("AdmissionRemoved", "the Workload is no longer admitted")
    message = f"Workload {workload.name} evicted by Kueue ({why}): {detail}"
    history: dict[str, Any] = {}
    if stops_attempt:
        record = RestartRecord(attempt=status.attempt, reason=Reason.EVICTED_BY_KUEUE, message=message[:4096],
                               counted=False, time=rfc3339(now))
        history = {"restart_history": restart_history_with(status, record)}
    if workload.evicted is not None and workload.cluster_queue is not None and not _holding_pods(pods):
        gate.workload_status = clear_admission(workload, now)
    return gate, Decision(status=history, conditions=(_admitted(
        False, Reason.EVICTED_BY_KUEUE, f"{message}; the job is suspended until Kueue admits it again"),))


def _hold(gate: KueueGate, message: str) -> tuple[KueueGate, Decision]:
    return gate, Decision(conditions=(_admitted(False, Reason.QUEUED_IN_KUEUE, message),))
