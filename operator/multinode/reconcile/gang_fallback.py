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
from multinode.reconcile.gang import set_gang_condition
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import Event, Plan, Verdict
from multinode.reconcile.restarts import backoff_seconds, new_attempt

def not_ganged(job: TrainingJob) -> str:
    """Why the job has no gang: said in every fallback message, so a user sees it is their choice or the cluster's."""
    if not job.spec.scheduling.native_pod_group:
        return "not ganged: spec.scheduling.nativePodGroup is false"
    return "not ganged: the apiserver serves no scheduling.k8s.io/v1alpha2 PodGroup"


def _fallback(status: TrainingJobStatus) -> bool:
    return status.scheduling is not None and status.scheduling.gang == GangMode.NONE


def wait_before_retry(job: TrainingJob, status: TrainingJobStatus, older: Iterable[ObservedPod], result: Plan,
                      now: datetime) -> Verdict | None:
    """After a release: the next attempt's pods wait out the backoff and until the released pods are gone
    (creating them sooner would only find the capacity they still hold). None once they may be created."""
    scheduling = status.scheduling
    if scheduling is None or scheduling.next_try_time is None:
        return None
    lingering = [p for p in older if p.active or p.terminating]
    wait = (parse_time(scheduling.next_try_time, now) - now).total_seconds()
    if wait <= 0 and not lingering:
        scheduling.next_try_time = None
        return None
    result.come_back_in(wait if wait > 0 else None)
    gone = f"; {len(lingering)} released pods still terminating" if lingering else ""
    message = (f"waiting for capacity for {job.spec.num_nodes} nodes: released a partial gang "
               f"({scheduling.releases} so far; {not_ganged(job)}); attempt {status.attempt} is created at "
               f"{scheduling.next_try_time}{gone}")
    set_gang_condition(job, status, False, Reason.PARTIAL_GANG_RELEASED, message, now)
    return Verdict(Phase.PENDING, Reason.PARTIAL_GANG_RELEASED, message)


def release_partial_gang(job: TrainingJob, status: TrainingJobStatus, current: Mapping[int, ObservedPod],
                         result: Plan, now: datetime) -> Verdict | None:
    """A Pending verdict while the attempt waits for capacity, releasing it once a partial gang outlived the
    timeout; None when no pod is unschedulable (the judge decides) or the attempt is ganged."""
    if not _fallback(status):
        return None
    scheduling = status.scheduling
    assert scheduling is not None
    n = job.spec.num_nodes
    active = sorted((p for p in current.values() if p.active), key=lambda p: p.index)
    bound = [p for p in active if p.node]
    waiting = [p for p in active if p.node is None and p.unschedulable]
    if not waiting:
        scheduling.partial_since = None
        if len(bound) == n:
            set_gang_condition(job, status, True, Reason.GANG_PLACED, f"all {n} pods bound ({not_ganged(job)})", now)
        return None
    why = f"{waiting[0].name}: {waiting[0].unschedulable}"
    if not bound:
        scheduling.partial_since = None
        message = (f"waiting for capacity for {n} nodes: {len(waiting)}/{n} pods unschedulable, none bound "
                   f"(no GPU held; {not_ganged(job)}); {why}")
        set_gang_condition(job, status, False, Reason.WAITING_FOR_CAPACITY, message, now)
        return Verdict(Phase.PENDING, Reason.WAITING_FOR_CAPACITY, message)
    since = parse_time(scheduling.partial_since, now) if scheduling.partial_since else now
    scheduling.partial_since = rfc3339(since)
    timeout = job.spec.scheduling.partial_gang_timeout_seconds
    left = timeout - (now - since).total_seconds()
    if left > 0:
        result.come_back_in(left)
        message = (f"waiting for capacity for {n} nodes: {len(bound)}/{n} pods bound, {len(waiting)} unschedulable "
                   f"({not_ganged(job)}); the bound pods are released at {rfc3339(since + timedelta(seconds=timeout))} "
                   f"unless all fit; {why}")
        set_gang_condition(job, status, False, Reason.WAITING_FOR_CAPACITY, message, now)
        return Verdict(Phase.PENDING, Reason.WAITING_FOR_CAPACITY, message)
    return _release(job, status, active, len(bound), result, now)


def _release(job: TrainingJob, status: TrainingJobStatus, active: list[ObservedPod], bound: int, result: Plan,
             now: datetime) -> Verdict:
    scheduling = status.scheduling
    assert scheduling is not None
    delay = backoff_seconds(job, scheduling.releases)
    released = status.attempt
    status.attempt += 1
    new_attempt(status)
    scheduling.releases += 1
    scheduling.next_try_time = rfc3339(now + timedelta(seconds=delay))
    result.pods_to_create = []
    result.delete(p.name for p in active)
    result.come_back_in(delay)
    message = (f"waiting for capacity for {job.spec.num_nodes} nodes: attempt {released} held {bound} bound pods "
               f"for {job.spec.scheduling.partial_gang_timeout_seconds}s while the rest were unschedulable; "
               f"released them all ({not_ganged(job)}); attempt {status.attempt} at {scheduling.next_try_time} "
               f"(release {scheduling.releases}, not a restart)")
    result.events.append(Event("Warning", Reason.PARTIAL_GANG_RELEASED, message))
    set_gang_condition(job, status, False, Reason.PARTIAL_GANG_RELEASED, message, now)
    return Verdict(Phase.PENDING, Reason.PARTIAL_GANG_RELEASED, message)
