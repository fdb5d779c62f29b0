"""scheduler-plugins' coscheduling (spec.scheduling.coscheduling): a scheduling.x-k8s.io PodGroup per attempt
(gang_scheduler.py says why per attempt), the pods joined to it by its group label and scheduled by the
scheduler that runs the plugin.

Field names checked against sigs.k8s.io/scheduler-plugins v0.34.7
(apis/scheduling/v1alpha1 PodGroupSpec, PodGroupLabel).
"""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import (COSCHEDULING_API_GROUP, COSCHEDULING_API_VERSION, COSCHEDULING_GROUP_LABEL,
                                     POD_GROUP_KIND, POD_GROUP_PLURAL)
from multinode.api.status import GangMode
from multinode.integrations.gang_scheduler import GangSchedulerGroups
from multinode.reconcile.kinds import ApiKind
from multinode.render.pod import PodKeys

COSCHEDULING_POD_GROUP = ApiKind(COSCHEDULING_API_GROUP, COSCHEDULING_API_VERSION, POD_GROUP_KIND, POD_GROUP_PLURAL)


class Coscheduling(GangSchedulerGroups):
    name = "coscheduling"
    kind = COSCHEDULING_POD_GROUP
    gang_mode = GangMode.COSCHEDULING
    placed_by = "coscheduling"

    def scheduler(self, job: TrainingJob) -> Any | None:
        return job.spec.scheduling.coscheduling

    def group_spec(self, job: TrainingJob) -> dict[str, Any]:
        coscheduling = job.spec.scheduling.coscheduling
        if coscheduling is None or coscheduling.schedule_timeout_seconds is None:
            return {}
        return {"scheduleTimeoutSeconds": coscheduling.schedule_timeout_seconds}

    def join(self, group: str) -> PodKeys:
        return PodKeys(labels={COSCHEDULING_GROUP_LABEL: group})
