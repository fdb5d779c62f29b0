"""No partial gang kept for long where the apiserver serves no PodGroup (status.scheduling.gang None).

The default scheduler binds pods one at a time: a 20-node job on 8 free nodes gets 8 pods bound, which hold
their GPUs while it waits for 12 more, and two jobs can each hold half of what both need. Without the
native gang the operator cannot place all or none, but it can refuse to hold a partial gang for ever: once
some pods of the attempt are bound and others unschedulable for spec.scheduling.partialGangTimeoutSeconds,
every pod of the attempt is deleted (the bound ones free their GPUs) and a fresh attempt is created after
failurePolicy.backoff (exponential in the releases so far).

The trade-off: a release throws away the bound pods' place in the cluster; with capacity arriving slowly
the job may be released several times before it fits, and while a partial gang waits its GPUs are held
(bounded by the timeout). A release is not a restart: no counted or uncounted restart, no restart history,
no maxRestarts; status.scheduling.releases counts them. Pods that are all unschedulable hold nothing, so
they just wait (WaitingForCapacity).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.status import GangMode
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.decision import Decision
from multinode.reconcile.gang import gang_condition
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import Event, Verdict
from multinode.reconcile.restarts import backoff_seconds, new_attempt

def not_ganged(job: TrainingJob) -> str:
    """Why the job has no gang: said in every fallback message, so a user sees it is their choice or the cluster's."""
    if not job.spec.scheduling.native_pod_group:
        return "not ganged: spec.scheduling.nativePodGroup is false"
    return "not ganged: the apiserver serves no scheduling.k8s.io/v1alpha2 PodGroup"


def _fallback(status: TrainingJobStatus) -> bool:
    return status.scheduling is not None and status.scheduling.gang == GangMode.NONE


def wait_before_retry(job: TrainingJob, status: TrainingJobStatus, older: Iterable[ObservedPod],
                      now: datetime) -> Decision:
    """After a release: the next attempt's pods wait out the backoff and until the released pods are gone
    (creating them sooner would only find the capacity they still hold): a Pending verdict while they wait."""
    scheduling = status.scheduling
    if scheduling is None or scheduling.next_try_time is None:
        return Decision()
    lingering = [p for p in older if p.active or p.terminating]
    wait = (parse_time(scheduling.next_try_time, now) - now).total_seconds()
    if wait <= 0 and not lingering:
        return Decision(status={"scheduling": scheduling.model_copy(update={"next_try_time": None})})
    gone = f"; {len(lingering)} released pods still terminating" if lingering else ""
    message = (f"waiting for capacity for {job.spec.num_nodes} nodes: released a partial gang "
               f"({scheduling.releases} so far; {not_ganged(job)}); attempt {status.attempt} is created at "
               f"{scheduling.next_try_time}{gone}")
    return Decision(verdict=Verdict(Phase.PENDING, Reason.PARTIAL_GANG_RELEASED, message),
                    conditions=(gang_condition(False, Reason.PARTIAL_GANG_RELEASED, message),),
                    requeue_after=wait if wait > 0 else None)


def release_partial_gang(job: TrainingJob, status: TrainingJobStatus, current: Mapping[int, ObservedPod],
                         now: datetime) -> Decision:
    """A Pending verdict while the attempt waits for capacity, releasing it once a partial gang outlived the
    timeout; no verdict when no pod is unschedulable (the judge decides) or the attempt is ganged."""
    if not _fallback(status):
        return Decision()
    scheduling = status.scheduling
    assert scheduling is not None
    n = job.spec.num_nodes
    active = sorted((p for p in current.values() if p.active), key=lambda p: p.index)
    bound = [p for p in active if p.node]
    waiting = [p for p in active if p.node is None and p.unschedulable]
    not_partial = {"scheduling": scheduling.model_copy(update={"partial_since": None})}
    if not waiting:
        placed = (gang_condition(True, Reason.GANG_PLACED, f"all {n} pods bound ({not_ganged(job)})"),)
        return Decision(status=not_partial, conditions=placed if len(bound) == n else ())
    why = f"{waiting[0].name}: {waiting[0].unschedulable}"
    if not bound:
        message = (f"waiting for capacity for {n} nodes: {len(waiting)}/{n} pods unschedulable, none bound "
                   f"(no GPU held; {not_ganged(job)}); {why}")
        return Decision(verdict=Verdict(Phase.PENDING, Reason.WAITING_FOR_CAPACITY, message), status=not_partial,
                        conditions=(gang_condition(False, Reason.WAITING_FOR_CAPACITY, message),))
    since = parse_time(scheduling.partial_since, now) if scheduling.partial_since else now
    timeout = job.spec.scheduling.partial_gang_timeout_seconds
    left = timeout - (now - since).total_seconds()
    if left > 0:
        message = (f"waiting for capacity for {n} nodes: {len(bound)}/{n} pods bound, {len(waiting)} unschedulable "
                   f"({not_ganged(job)}); the bound pods are released at {rfc3339(since + timedelta(seconds=timeout))} "
                   f"unless all fit; {why}")
        return Decision(verdict=Verdict(Phase.PENDING, Reason.WAITING_FOR_CAPACITY, message),
                        status={"scheduling": scheduling.model_copy(update={"partial_since": rfc3339(since)})},
                        conditions=(gang_condition(False, Reason.WAITING_FOR_CAPACITY, message),), requeue_after=left)
    return _release(job, status, active, len(bound), now)


def _release(job: TrainingJob, status: TrainingJobStatus, active: list[ObservedPod], bound: int,
             now: datetime) -> Decision:
    scheduling = status.scheduling
    assert scheduling is not None
    delay = backoff_seconds(job, scheduling.releases)
    released, attempt = status.attempt, status.attempt + 1
    edits = new_attempt(status)  # its scheduling is the attempt's, with no group chosen and no partial gang
    next_try = rfc3339(now + timedelta(seconds=delay))
    edits["scheduling"] = edits["scheduling"].model_copy(update={"releases": scheduling.releases + 1,
                                                                 "next_try_time": next_try})
    message = (f"waiting for capacity for {job.spec.num_nodes} nodes: attempt {released} held {bound} bound pods "
               f"for {job.spec.scheduling.partial_gang_timeout_seconds}s while the rest were unschedulable; "
               f"released them all ({not_ganged(job)}); attempt {attempt} at {next_try} "
               f"(release {scheduling.releases + 1}, not a restart)")
    return Decision(verdict=Verdict(Phase.PENDING, Reason.PARTIAL_GANG_RELEASED, message),
                    status={**edits, "attempt": attempt}, stop_creating=True,
                    delete=tuple(p.name for p in active), requeue_after=delay,
                    events=(Event("Warning", Reason.PARTIAL_GANG_RELEASED, message),),
                    conditions=(gang_condition(False, Reason.PARTIAL_GANG_RELEASED, message),))
