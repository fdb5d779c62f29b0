"""An attempt's gang group: its name and the object every gang scheduler's PodGroup shares (the native one,
Volcano's, coscheduling's: integrations/).

Why one group per attempt and not one per job: a PodGroup's spec is immutable, and the scheduler counts a
group's scheduled pods towards minCount. Pods of an attempt still terminating (Recreate) would count for
the next attempt's gang, which could then be placed partly; a group of its own gives every attempt an
all-or-nothing placement of exactly its numNodes pods. The groups of earlier attempts are deleted when an
attempt ends, the last one goes with the job (owner reference).
"""

from __future__ import annotations

import hashlib
from typing import Any

from multinode.api import LABEL_ATTEMPT, TrainingJob
from multinode.api.base import MAX_LABEL_VALUE_LENGTH
from multinode.api.constants import POD_GROUP_KIND
from multinode.render.names import common_labels, job_identity, owner_reference


def pod_group_name(job_name: str, attempt: int) -> str:
    """`<job>-a<attempt>`, like the pods' `-a<attempt>`. Also a label value (coscheduling joins a pod to its
    group by the label scheduling.x-k8s.io/pod-group), so at most 63 characters: a longer one keeps the
    job name's start and puts 8 hex of its hash before the attempt, `<job start>-<hash>-a<attempt>`, still
    one name per job and attempt."""
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    name = f"{job_name}-a{attempt}"
    if len(name) <= MAX_LABEL_VALUE_LENGTH:
        return name
    suffix = f"-{hashlib.sha256(job_name.encode()).hexdigest()[:8]}-a{attempt}"
    return job_name[:MAX_LABEL_VALUE_LENGTH - len(suffix)].rstrip("-") + suffix


def attempt_group(job: TrainingJob, attempt: int, api_version: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A PodGroup of any gang scheduler for one attempt: `<job>-a<attempt>`, the attempt's label, owned by
    the job."""
    identity = job_identity(job)
    return {
        "apiVersion": api_version,
        "kind": POD_GROUP_KIND,
        "metadata": {
            "name": pod_group_name(identity.name, attempt),
            "namespace": identity.namespace,
            "labels": {**common_labels(identity.name), LABEL_ATTEMPT: str(attempt)},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }
