"""Volcano's gang (spec.scheduling.volcano): a scheduling.volcano.sh PodGroup per attempt (gang_scheduler.py says
why per attempt), the pods joined to it by Volcano's group annotation and scheduled by Volcano's scheduler.

Field names checked against volcano.sh/apis v1.14.0 (scheduling/v1beta1 PodGroupSpec, KubeGroupNameAnnotationKey).
"""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import (POD_GROUP_KIND, POD_GROUP_PLURAL, VOLCANO_API_GROUP, VOLCANO_API_VERSION,
                                     VOLCANO_GROUP_ANNOTATION)
from multinode.api.status import GangMode
from multinode.integrations.gang_scheduler import GangSchedulerGroups
from multinode.reconcile.kinds import ApiKind
from multinode.render.pod import PodKeys

VOLCANO_POD_GROUP = ApiKind(VOLCANO_API_GROUP, VOLCANO_API_VERSION, POD_GROUP_KIND, POD_GROUP_PLURAL)


class Volcano(GangSchedulerGroups):
    name = "volcano"
    kind = VOLCANO_POD_GROUP
    gang_mode = GangMode.VOLCANO
    placed_by = "Volcano"

    def scheduler(self, job: TrainingJob) -> Any | None:
        return job.spec.scheduling.volcano

    def group_spec(self, job: TrainingJob) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        volcano = job.spec.scheduling.volcano
        if volcano is not None and volcano.queue:
            spec["queue"] = volcano.queue
        if job.spec.pod_template.priority_class_name:
            spec["priorityClassName"] = job.spec.pod_template.priority_class_name
        return spec

    def join(self, group: str) -> PodKeys:
        return PodKeys(annotations={VOLCANO_GROUP_ANNOTATION: group})
