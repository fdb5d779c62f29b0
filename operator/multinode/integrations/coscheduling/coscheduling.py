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

    def named(self, job: TrainingJob) -> bool:
        return job.spec.scheduling.coscheduling is not None

    def group_spec(self, job: TrainingJob) -> dict[str, Any]:
        coscheduling = job.spec.scheduling.coscheduling
        assert coscheduling is not None
        if coscheduling.schedule_timeout_seconds is None:
            return {}
        return {"scheduleTimeoutSeconds": coscheduling.schedule_timeout_seconds}

    def pod_keys(self, job: TrainingJob, attempt: int, group: str | None) -> PodKeys:
        coscheduling = job.spec.scheduling.coscheduling
        if group is None or coscheduling is None:
            return PodKeys()
        # The CRD refuses podTemplate.schedulerName beside spec.scheduling.coscheduling: this one is the pods'.
        return PodKeys(labels={COSCHEDULING_GROUP_LABEL: group}, scheduler_name=coscheduling.scheduler_name)
