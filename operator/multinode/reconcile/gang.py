"""Gang scheduling: which mechanism an attempt uses, its native PodGroup, and what the status says about it.

Every attempt is a gang without a spec field. The mechanism is chosen when the attempt's pods are first
created and kept for the attempt (its pods must all join the same group, or none):

- `PodGroup` where the apiserver serves scheduling.k8s.io/v1alpha2 PodGroups (the controller asks discovery
  once at start): one PodGroup per attempt with gang minCount numNodes (render/pod_group.py says why per
  attempt); the scheduler binds all pods or none, and the group's PodGroupScheduled condition says why not.
- `Volcano` or `Coscheduling` when spec.scheduling names that gang scheduler: the operator creates its
  PodGroup per attempt (render/gang_group.py), before the pods, and deletes the earlier attempts' ones;
  the pods carry its key and schedulerName, and no native PodGroup is made (two gangs would fight).
- `External` when spec.podGroup (deprecated) asks for an out-of-tree gang scheduler's labels: that
  scheduler gangs the pods with a group it finds elsewhere; the operator creates no PodGroup.
- `None` otherwise: pods are bound one by one, and gang_fallback.py keeps no partial gang for long.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from multinode.api import LABEL_ATTEMPT, LABEL_JOB_NAME, TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.status import GangMode, SchedulingStatus
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import GroupPrune, Verdict
from multinode.reconcile.ownership import controller_uid
from multinode.render import pod_group_name, render_pod_group
from multinode.render.gang_group import GANG_GROUP_API_VERSIONS, named_gang_scheduler, render_gang_group
from multinode.render.names import job_identity

# The scheduler's words on a pod that waits only for the rest of its gang: true of every member but one,
# so the job's message quotes another pod's (the one that says which resource is short) when there is one.
WAITING_FOR_GANG = "waiting for minCount pods"


# The mechanisms whose attempts have a PodGroup: the native one, or the one of the gang scheduler named.
GROUP_MODES = (GangMode.POD_GROUP, *GANG_GROUP_API_VERSIONS)
# How each mechanism is named in the status' words.
_BY = {GangMode.POD_GROUP: "the scheduler", GangMode.VOLCANO: "Volcano", GangMode.COSCHEDULING: "coscheduling"}


@dataclass(frozen=True)
class ObservedPodGroup:
    name: str
    job_name: str
    attempt: int
    # The PodGroupScheduled condition the scheduler writes: "True", "False" or None (not yet decided).
    scheduled: str | None = None
    reason: str | None = None
    message: str | None = None
    terminating: bool = False
    # spec.schedulingConstraints.topology keys as the apiserver stored them: it drops the constraint when
    # TopologyAwareWorkloadScheduling is off, and discovery cannot tell, so the stored group is the answer.
    topology_keys: tuple[str, ...] = ()
    owner_uid: str | None = None  # the TrainingJob controlling it (reconcile/ownership.py)


def observe_pod_group(body: Mapping[str, Any]) -> ObservedPodGroup | None:
    """Project a raw PodGroup onto what planning needs; None for groups without our labels."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    job, attempt = labels.get(LABEL_JOB_NAME), labels.get(LABEL_ATTEMPT)
    if job is None or attempt is None or not attempt.isdigit():
        return None
    conditions = (body.get("status") or {}).get("conditions") or []
    scheduled: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "PodGroupScheduled"), {})
    constraints = ((body.get("spec") or {}).get("schedulingConstraints") or {}).get("topology") or []
    return ObservedPodGroup(name=meta.get("name", ""), job_name=job, attempt=int(attempt),
                            scheduled=scheduled.get("status"), reason=scheduled.get("reason"),
                            message=scheduled.get("message"), terminating=meta.get("deletionTimestamp") is not None,
                            topology_keys=tuple(c.get("key", "") for c in constraints),
                            owner_uid=controller_uid(meta))


def choose_gang(job: TrainingJob, status: TrainingJobStatus, current: Mapping[int, ObservedPod],
                gang_api: bool) -> SchedulingStatus:
    """The attempt's mechanism, chosen when its first pods are created and kept until the next attempt.

    Pods of the attempt that exist already decided it, whatever the status says: an operator killed after
    creating some of them and before writing its status, or an attempt started by an operator that knew
    nothing of gangs. The rest must join the same group, or none: pods waiting for a group of N that the
    others never joined would wait for ever."""
    kept = status.scheduling
    if kept is not None and status.attempt_start_time is not None:
        return kept
    releases = kept.releases if kept is not None else 0
    next_try = kept.next_try_time if kept is not None else None
    joined = next((p.pod_group for p in current.values() if p.pod_group), None)
    named = named_gang_scheduler(job)
    if joined is not None:
        mode = GangMode.POD_GROUP
    elif named is not None:
        mode = named
    elif job.spec.pod_group is not None:
        mode = GangMode.EXTERNAL
    elif gang_api and not current and job.spec.scheduling.native_pod_group:
        mode = GangMode.POD_GROUP
    else:
        mode = GangMode.NONE
    group = joined or (pod_group_name(job_identity(job).name, status.attempt) if mode in GROUP_MODES else None)
    return SchedulingStatus(gang=mode, pod_group=group, partial_since=None, releases=releases, next_try_time=next_try)


def delete_old_pod_groups(status: TrainingJobStatus, groups: Iterable[ObservedPodGroup]) -> Decision:
    """Earlier attempts' groups go (the protection finalizer keeps each until its pods are gone)."""
    return Decision(pod_groups_to_delete=tuple(
        sorted(g.name for g in groups if g.attempt < status.attempt and not g.terminating)))


def attempt_pod_group(status: TrainingJobStatus, groups: Iterable[ObservedPodGroup]) -> ObservedPodGroup | None:
    """The attempt's native PodGroup as observed (None: not there, or the attempt has none)."""
    scheduling = status.scheduling
    if scheduling is None or scheduling.gang != GangMode.POD_GROUP:
        return None
    return next((g for g in groups if g.name == scheduling.pod_group and not g.terminating), None)


def create_pod_group(job: TrainingJob, status: TrainingJobStatus, groups: Iterable[ObservedPodGroup]) -> Decision:
    """The attempt's native PodGroup, created (before its pods) when it is not there. A gang scheduler's
    PodGroup is not watched: it is created (again: AlreadyExists counts as created) while the attempt's pods
    are, and the earlier attempts' ones are deleted then."""
    scheduling = status.scheduling
    if scheduling is not None and scheduling.gang in GANG_GROUP_API_VERSIONS:
        return Decision(objects_to_create=(render_gang_group(job, status.attempt, scheduling.gang),),
                        gang_groups_to_prune=GroupPrune(GANG_GROUP_API_VERSIONS[scheduling.gang],
                                                        job_identity(job).name, status.attempt))
    if scheduling is None or scheduling.gang != GangMode.POD_GROUP or attempt_pod_group(status, groups) is not None:
        return Decision()
    return Decision(objects_to_create=(render_pod_group(job, status.attempt),))


def scheduler_places_domain(job: TrainingJob, status: TrainingJobStatus, group: ObservedPodGroup | None) -> bool | None:
    """With spec.topology and a native gang, the PodGroup's topology constraint lets the scheduler pick the
    domain with room for the whole gang (the operator counts only node capacity). True: it does (no node
    selector); False: the apiserver dropped the constraint, the operator's domain applies; None: the group
    is not observed yet, so the pods wait for it (they would wait at the scheduler anyway)."""
    if job.spec.topology is None or status.scheduling is None or status.scheduling.gang != GangMode.POD_GROUP:
        return False
    if group is None:
        return None
    return job.spec.topology.same_domain_label in group.topology_keys


def placed_domain(job: TrainingJob, current: Mapping[int, ObservedPod],
                  labels: Mapping[str, Mapping[str, str]]) -> str | None:
    """The domain the scheduler put a fully bound gang in (status.topologyDomain), from its nodes' labels."""
    if job.spec.topology is None or len(current) < job.spec.num_nodes or any(p.node is None for p in current.values()):
        return None
    domains = {labels.get(p.node or "", {}).get(job.spec.topology.same_domain_label) for p in current.values()}
    return domains.pop() if len(domains) == 1 else None


def _pods_message(pods: list[ObservedPod]) -> str:
    waiting = [p for p in pods if p.unschedulable]
    telling = [p for p in waiting if WAITING_FOR_GANG not in (p.unschedulable or "")] or waiting
    return f"; {telling[0].name}: {telling[0].unschedulable}" if telling else ""


def gang_verdict(job: TrainingJob, status: TrainingJobStatus, current: Mapping[int, ObservedPod],
                 groups: Iterable[ObservedPodGroup], verdict: Verdict) -> Decision:
    """The GangScheduled condition of an attempt with a PodGroup, and `verdict` (the judge's) or a Pending one
    that says the native gang does not fit (a gang scheduler's own words are on its pods, which it quotes)."""
    scheduling = status.scheduling
    if scheduling is None or scheduling.gang not in GROUP_MODES:
        return Decision(verdict=verdict)
    n = job.spec.num_nodes
    group = next((g for g in groups if g.name == scheduling.pod_group), None)
    bound = [p for p in current.values() if p.node]
    by = _BY[scheduling.gang]
    if len(bound) == n:
        ok, reason = True, Reason.GANG_PLACED
        message = (f"PodGroup {scheduling.pod_group} placed all {n} pods together"
                   if scheduling.gang == GangMode.POD_GROUP
                   else f"{by} placed all {n} pods of PodGroup {scheduling.pod_group} together")
    elif group is not None and group.scheduled == "False":
        ok, reason = False, Reason.GANG_UNSCHEDULABLE
        message = (f"the gang of {n} pods does not fit, none is bound (no GPU held); PodGroup {group.name}: "
                   f"{group.message or group.reason}{_pods_message(sorted(current.values(), key=lambda p: p.index))}")
    else:
        ok, reason = False, Reason.WAITING_FOR_SCHEDULING
        message = f"PodGroup {scheduling.pod_group}: waiting for {by} to place all {n} pods together"
        if scheduling.gang != GangMode.POD_GROUP:
            message += _pods_message(sorted(current.values(), key=lambda p: p.index))
    if reason == Reason.GANG_UNSCHEDULABLE and verdict.reason in (Reason.UNSCHEDULABLE, Reason.WAITING_FOR_SCHEDULING):
        verdict = Verdict(verdict.phase, reason, message)
    return Decision(verdict=verdict, conditions=(gang_condition(ok, reason, message),))


def gang_condition(ok: bool, reason: str, message: str) -> SetCondition:
    return SetCondition(ConditionType.GANG_SCHEDULED, "True" if ok else "False", reason, message)
