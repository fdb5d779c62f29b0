"""The PodGroup of a gang scheduler the job names (spec.scheduling.volcano / coscheduling), one per attempt,
owned by the job, and what joins a pod to it.

Per attempt, as the native group (render/pod_group.py), and for the same reason: both schedulers count the
group's pods that are already placed towards minMember, so pods of an attempt still terminating would count
for the next attempt's gang, which could then be placed in part. A group per attempt gives every attempt an
all-or-nothing placement of exactly its numNodes pods, and a PodGroup status (Volcano's phase, running and
failed counts) about that attempt alone. The operator deletes the groups of earlier attempts when the next
attempt's group is made; the last one goes with the job (owner reference).
"""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import (
    COSCHEDULING_API_GROUP,
    COSCHEDULING_API_VERSION,
    COSCHEDULING_GROUP_LABEL,
    VOLCANO_API_GROUP,
    VOLCANO_API_VERSION,
    VOLCANO_GROUP_ANNOTATION,
)
from multinode.api.status import GangMode
from multinode.render.pod_group import attempt_group

# The apiVersion of each gang scheduler's PodGroup.
GANG_GROUP_API_VERSIONS = {
    GangMode.VOLCANO: f"{VOLCANO_API_GROUP}/{VOLCANO_API_VERSION}",
    GangMode.COSCHEDULING: f"{COSCHEDULING_API_GROUP}/{COSCHEDULING_API_VERSION}",
}


def named_gang_scheduler(job: TrainingJob) -> GangMode | None:
    """The gang scheduler spec.scheduling names (Volcano or Coscheduling), if any."""
    scheduling = job.spec.scheduling
    if scheduling.volcano is not None:
        return GangMode.VOLCANO
    if scheduling.coscheduling is not None:
        return GangMode.COSCHEDULING
    return None


def render_gang_group(job: TrainingJob, attempt: int, mode: GangMode) -> dict[str, Any]:
    """The attempt's PodGroup for `mode` (Volcano or Coscheduling): minMember numNodes."""
    spec: dict[str, Any] = {"minMember": job.spec.num_nodes}
    scheduling = job.spec.scheduling
    if mode == GangMode.VOLCANO:
        assert scheduling.volcano is not None
        if scheduling.volcano.queue:
            spec["queue"] = scheduling.volcano.queue
        if job.spec.pod_template.priority_class_name:
            spec["priorityClassName"] = job.spec.pod_template.priority_class_name
    elif mode == GangMode.COSCHEDULING:
        assert scheduling.coscheduling is not None
        if scheduling.coscheduling.schedule_timeout_seconds is not None:
            spec["scheduleTimeoutSeconds"] = scheduling.coscheduling.schedule_timeout_seconds
    else:
        raise ValueError(f"no gang scheduler's PodGroup for gang mode {mode}")
    return attempt_group(job, attempt, GANG_GROUP_API_VERSIONS[mode], spec)


def gang_scheduler_name(job: TrainingJob, mode: GangMode | None) -> str | None:
    """The pods' schedulerName under a named gang scheduler (the CRD refuses podTemplate.schedulerName then)."""
    if mode == GangMode.VOLCANO and job.spec.scheduling.volcano is not None:
        return job.spec.scheduling.volcano.scheduler_name
    if mode == GangMode.COSCHEDULING and job.spec.scheduling.coscheduling is not None:
        return job.spec.scheduling.coscheduling.scheduler_name
    return None


def gang_pod_keys(mode: GangMode | None, group: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) that join a pod to its gang scheduler's group: coscheduling reads the label,
    Volcano the annotation."""
    if group is None:
        return {}, {}
    if mode == GangMode.VOLCANO:
        return {}, {VOLCANO_GROUP_ANNOTATION: group}
    if mode == GangMode.COSCHEDULING:
        return {COSCHEDULING_GROUP_LABEL: group}, {}
    return {}, {}
