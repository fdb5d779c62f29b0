"""Gang scheduling: which mechanism an attempt uses, and what the status says about it.

Every attempt is a gang without a spec field. The mechanisms are integrations (integrations/): the first in
the registry's order that wants the attempt gangs it, chosen when the attempt's pods are first created and
kept for the attempt (its pods must all join the same group, or none):

- `Volcano` or `Coscheduling` when spec.scheduling names that gang scheduler: its PodGroup per attempt;
- `External` when spec.podGroup (deprecated) asks for an out-of-tree gang scheduler's labels;
- `PodGroup` where the apiserver serves scheduling.k8s.io/v1alpha2 PodGroups: the native gang;
- `None` otherwise: pods are bound one by one, and gang_fallback.py keeps no partial gang for long.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.status import GangMode, SchedulingStatus
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.integration import Seen
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import Verdict
from multinode.render import pod_group_name
from multinode.render.names import job_identity

# The scheduler's words on a pod that waits only for the rest of its gang: true of every member but one,
# so the job's message quotes another pod's (the one that says which resource is short) when there is one.
WAITING_FOR_GANG = "waiting for minCount pods"


def choose_gang(job: TrainingJob, status: TrainingJobStatus, current: Mapping[int, ObservedPod],
                integrations: Sequence[Seen]) -> SchedulingStatus:
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
    if joined is not None:
        mode, grouped = GangMode.POD_GROUP, True
    else:
        ganging = next((s.integration for s in integrations if s.integration.gang_mode is not None
                        and s.integration.wants_gang(job, s, current)), None)
        mode = ganging.gang_mode if ganging is not None and ganging.gang_mode is not None else GangMode.NONE
        grouped = ganging is not None and ganging.per_attempt_group
    group = joined or (pod_group_name(job_identity(job).name, status.attempt) if grouped else None)
    return SchedulingStatus(gang=mode, pod_group=group, partial_since=None, releases=releases, next_try_time=next_try)


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


def ganging(status: TrainingJobStatus, integrations: Sequence[Seen]) -> Seen | None:
    """The integration that gangs the attempt (None: no gang, or not an integration's)."""
    mode = status.scheduling.gang if status.scheduling is not None else None
    return next((s for s in integrations if mode is not None and s.integration.gang_mode == mode), None)


def gang_verdict(job: TrainingJob, status: TrainingJobStatus, current: Mapping[int, ObservedPod],
                 gang: Seen | None, verdict: Verdict) -> Decision:
    """The GangScheduled condition of an attempt with a PodGroup, and `verdict` (the judge's) or a Pending one
    that says the native gang does not fit (a gang scheduler's own words are on its pods, which it quotes)."""
    scheduling = status.scheduling
    if scheduling is None or gang is None or not gang.integration.per_attempt_group:
        return Decision(verdict=verdict)
    n = job.spec.num_nodes
    group = gang.integration.group(status, gang)
    bound = [p for p in current.values() if p.node]
    by = gang.integration.placed_by
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
