"""spec.podGroup (deprecated): the keys an out-of-tree gang scheduler reads, on every pod of the job.
scheduler-plugins' coscheduling reads the label, Volcano the annotation; each expects a PodGroup of that name
(with minMember) from the cluster's own scheduler integration: the operator makes none (gang mode External).
With spec.scheduling.volcano / coscheduling instead, the operator makes the group (volcano/, coscheduling/).
"""

from __future__ import annotations

from collections.abc import Mapping

from multinode.api import TrainingJob
from multinode.api.constants import COSCHEDULING_GROUP_LABEL, VOLCANO_GROUP_ANNOTATION
from multinode.api.status import GangMode
from multinode.reconcile.integration import Integration, Seen
from multinode.reconcile.observe import ObservedPod
from multinode.render.names import job_name
from multinode.render.pod import PodKeys

MIN_MEMBER_ANNOTATION = "multinode.dev/pod-group-min-member"


class PodGroupLabels(Integration):
    name = "pod_group_labels"
    gang_mode = GangMode.EXTERNAL

    def wants_gang(self, job: TrainingJob, seen: Seen, current: Mapping[int, ObservedPod]) -> bool:
        return job.spec.pod_group is not None

    def pod_keys(self, job: TrainingJob, attempt: int, group: str | None) -> PodKeys:
        pod_group = job.spec.pod_group
        if pod_group is None:
            return PodKeys()
        return PodKeys(labels={COSCHEDULING_GROUP_LABEL: job_name(job)},
                       annotations={VOLCANO_GROUP_ANNOTATION: job_name(job),
                                    MIN_MEMBER_ANNOTATION: str(pod_group.min_member or job.spec.num_nodes)})
