"""What the gang schedulers a job can name (spec.scheduling.volcano / coscheduling) share: a PodGroup of their
own kind per attempt, owned by the job, and a key on each pod that joins it (volcano/, coscheduling/).

Per attempt, as the native group (integrations/podgroup/), and for the same reason: both schedulers count the
group's pods that are already placed towards minMember, so pods of an attempt still terminating would count
for the next attempt's gang, which could then be placed in part. A group per attempt gives every attempt an
all-or-nothing placement of exactly its numNodes pods, and a PodGroup status (Volcano's phase, running and
failed counts) about that attempt alone. The operator deletes the groups of earlier attempts when the next
attempt's group is made; the last one goes with the job (owner reference). Those kinds are not watched
(their CRDs may come and go): the earlier groups are listed by the job's label when they are pruned, and a
404 on a create says the scheduler is not installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from http import HTTPStatus
from typing import Any

from multinode.api.elastic import gang_min_count
from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.reconcile.decision import Decision
from multinode.reconcile.integration import Integration, Refused, Seen
from multinode.reconcile.kinds import ApiKind, GroupPrune
from multinode.reconcile.observe import ObservedPod
from multinode.render.attempt_group import attempt_group
from multinode.render.names import job_identity
from multinode.render.pod import PodKeys


class GangSchedulerGroups(Integration):
    """A gang scheduler named in spec.scheduling: its PodGroup `kind` per attempt."""

    kind: ApiKind
    per_attempt_group = True

    def scheduler(self, job: TrainingJob) -> Any | None:
        """spec.scheduling's entry for this scheduler (None: the job does not name it)."""
        raise NotImplementedError

    def group_spec(self, job: TrainingJob) -> dict[str, Any]:
        raise NotImplementedError

    def join(self, group: str) -> PodKeys:
        """The label or annotation that joins a pod to `group`."""
        raise NotImplementedError

    def wants_gang(self, job: TrainingJob, seen: Seen, current: Mapping[int, ObservedPod]) -> bool:
        return self.scheduler(job) is not None

    def pod_keys(self, job: TrainingJob, attempt: int, group: str | None) -> PodKeys:
        named = self.scheduler(job)
        if group is None or named is None:
            return PodKeys()
        # The CRD refuses podTemplate.schedulerName beside a named gang scheduler: this one is the pods'.
        return replace(self.join(group), scheduler_name=named.scheduler_name)

    def render_group(self, job: TrainingJob, attempt: int) -> dict[str, Any]:
        """The attempt's PodGroup: minMember numNodes (an elastic job's minNodes), and the scheduler's own
        fields."""
        minimum = gang_min_count(job.spec.num_nodes, job.spec.elastic)
        return attempt_group(job, attempt, self.kind.api_version, {"minMember": minimum, **self.group_spec(job)})

    def attempt_objects(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen) -> Decision:
        """Created (again: AlreadyExists counts as created) while the attempt's pods are, and the earlier
        attempts' groups deleted then."""
        return Decision(objects_to_create=(self.render_group(job, status.attempt),),
                        objects_to_prune=(GroupPrune(self.kind, job_identity(job).name, status.attempt),))

    def refusal(self, api_version: str | None, http_status: int | None, message: str) -> Refused | None:
        """404 on its PodGroup: the apiserver serves no such kind, its CRD is not installed. The job stays
        Pending and no pod is created (none would be ganged); retried with backoff, so installing the CRD is
        enough."""
        if http_status != HTTPStatus.NOT_FOUND or api_version != self.kind.api_version:
            return None
        return Refused((ConditionType.GANG_SCHEDULED, ConditionType.RUNNING), Reason.GANG_SCHEDULER_NOT_INSTALLED,
                       f"spec.scheduling names {self.gang_mode}, but the apiserver serves no {api_version} PodGroup "
                       f"(is {self.gang_mode} installed, with its CRDs?): {message}; no pod is created until it "
                       "does, retrying")
