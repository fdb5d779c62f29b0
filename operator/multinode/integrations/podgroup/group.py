"""The native gang: one scheduling.k8s.io/v1alpha2 PodGroup per attempt (Kubernetes 1.36 alpha), owned by the
job, where the apiserver serves them (asked once at start) and spec.scheduling.nativePodGroup is not false.

Field names checked against k8s.io/api v0.36 (scheduling/v1alpha2 PodGroupSpec, core/v1 PodSchedulingGroup).
The group is created before the attempt's pods, which join it (schedulingGroup); the scheduler binds all of
them or none, and the group's PodGroupScheduled condition says why not. Earlier attempts' groups are deleted
(the protection finalizer keeps each until its pods are gone); the last one goes with the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from multinode.api.elastic import gang_min_count
from multinode.api import LABEL_ATTEMPT, LABEL_JOB_NAME, TrainingJob, TrainingJobStatus
from multinode.api.constants import POD_GROUP_API_GROUP, POD_GROUP_API_VERSION, POD_GROUP_KIND, POD_GROUP_PLURAL
from multinode.api.status import GangMode
from multinode.reconcile.decision import Decision
from multinode.reconcile.integration import GroupState, Integration, Reads, Seen, Watch
from multinode.reconcile.kinds import ApiKind, ObjectRef
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.ownership import controller_uid
from multinode.render.attempt_group import attempt_group
from multinode.render.pod import PodKeys

POD_GROUP = ApiKind(POD_GROUP_API_GROUP, POD_GROUP_API_VERSION, POD_GROUP_KIND, POD_GROUP_PLURAL)


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


def render_pod_group(job: TrainingJob, attempt: int) -> dict[str, Any]:
    """The attempt's PodGroup: gang policy with minCount numNodes (an elastic job's minNodes), so the scheduler
    binds every node's pod or none of them; with spec.topology, all in one domain of its label."""
    # Preempted as a whole (disruptionMode PodGroup): one pod of a gang taken is the whole gang restarted, so
    # the scheduler should weigh the whole gang as one victim. Both this and the priority need
    # WorkloadAwarePreemption; without it the apiserver drops them and the pods' own priority applies.
    minimum = gang_min_count(job.spec.num_nodes, job.spec.elastic)
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": minimum}},
                            "disruptionMode": "PodGroup"}
    if job.spec.pod_template.priority_class_name:
        spec["priorityClassName"] = job.spec.pod_template.priority_class_name
    if job.spec.topology is not None:
        # All members in one domain of the label (TopologyAwareWorkloadScheduling; the apiserver drops it
        # when that gate is off, which the operator reads back from the stored group: places_domain).
        spec["schedulingConstraints"] = {"topology": [{"key": job.spec.topology.same_domain_label}]}
    return attempt_group(job, attempt, POD_GROUP.api_version, spec)


def _groups(seen: Seen) -> tuple[ObservedPodGroup, ...]:
    return tuple(seen.observed or ())


def attempt_pod_group(status: TrainingJobStatus, seen: Seen) -> ObservedPodGroup | None:
    """The attempt's native PodGroup as observed (None: not there, or the attempt has none)."""
    scheduling = status.scheduling
    if scheduling is None or scheduling.gang != GangMode.POD_GROUP:
        return None
    return next((g for g in _groups(seen) if g.name == scheduling.pod_group and not g.terminating), None)


def delete_old_pod_groups(status: TrainingJobStatus, seen: Seen) -> Decision:
    """Earlier attempts' groups go (the protection finalizer keeps each until its pods are gone)."""
    return Decision(objects_to_delete=tuple(
        ObjectRef(POD_GROUP, name)
        for name in sorted(g.name for g in _groups(seen) if g.attempt < status.attempt_of_pods and not g.terminating)))


class NativePodGroup(Integration):
    name = "podgroup"
    api = POD_GROUP
    watches = (Watch(POD_GROUP, observe_pod_group),)
    gang_mode = GangMode.POD_GROUP
    per_attempt_group = True
    placed_by = "the scheduler"

    async def observe(self, job: TrainingJob, reads: Reads) -> tuple[ObservedPodGroup, ...]:
        return tuple(reads.owned(POD_GROUP))

    def wants_gang(self, job: TrainingJob, seen: Seen, current: Mapping[int, ObservedPod]) -> bool:
        # Not for an attempt some of whose pods exist without a group: the rest must not wait for one.
        return seen.served and not current and job.spec.scheduling.native_pod_group

    def attempt_objects(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen) -> Decision:
        """The attempt's PodGroup, created (before its pods) when it is not observed."""
        if attempt_pod_group(status, seen) is not None:
            return Decision()
        return Decision(objects_to_create=(render_pod_group(job, status.attempt),))

    def group(self, status: TrainingJobStatus, seen: Seen) -> GroupState | None:
        name = status.scheduling.pod_group if status.scheduling is not None else None
        found = next((g for g in _groups(seen) if g.name == name), None)
        return None if found is None else GroupState(found.name, found.scheduled, found.reason, found.message)

    def places_domain(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen) -> bool | None:
        """With spec.topology, the PodGroup's topology constraint lets the scheduler pick the domain with room
        for the whole gang (the operator counts only node capacity). True: it does (no node selector); False:
        the apiserver dropped the constraint, the operator's domain applies; None: the group is not observed
        yet, so the pods wait for it (they would wait at the scheduler anyway)."""
        if job.spec.topology is None:
            return False
        group = attempt_pod_group(status, seen)
        if group is None:
            return None
        return job.spec.topology.same_domain_label in group.topology_keys

    def pod_keys(self, job: TrainingJob, attempt: int, group: str | None) -> PodKeys:
        # core/v1 PodSchedulingGroup (1.36): the scheduler holds the pod until the group's minCount fit.
        return PodKeys(scheduling_group=group)

    def live_objects(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen) -> Decision:
        return delete_old_pod_groups(status, seen)

    def finish(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen, now: datetime) -> Decision:
        return delete_old_pod_groups(status, seen)
