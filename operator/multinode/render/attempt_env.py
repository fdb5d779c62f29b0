"""The attempt's ConfigMap: the environment every pod of one gang attempt shares, read through envFrom.

One per attempt, named after the job's uid and the attempt, created before the attempt's pods and owned
by the TrainingJob (it goes with the job). Per attempt because the rendezvous port and id change with each
attempt: a pod of an older attempt keeps reading its own attempt's values, never a newer one's. Immutable:
the kubelet reads it once instead of watching it, and nobody can change an attempt's contract under it.
"""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import LABEL_ATTEMPT
from multinode.render.env import attempt_env
from multinode.render.names import common_labels, job_identity, owner_reference


def attempt_env_name(job: TrainingJob, attempt: int) -> str:
    """`<job>-a<attempt>-<uid prefix>`: with the uid, a job deleted and created again under its name never
    finds the old job's ConfigMap (still waiting for the garbage collector) under the name it wants."""
    identity = job_identity(job)
    return f"{identity.name}-a{attempt}-{identity.uid.replace('-', '')[:8]}"


def render_attempt_env(job: TrainingJob, attempt: int, *, restarts: int = 0) -> dict[str, Any]:
    identity = job_identity(job)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": attempt_env_name(job, attempt),
            "namespace": identity.namespace,
            "labels": {**common_labels(identity.name), LABEL_ATTEMPT: str(attempt)},
            "ownerReferences": [owner_reference(job)],
        },
        "immutable": True,
        "data": attempt_env(job, attempt, restarts=restarts),
    }


def env_from_attempt(job: TrainingJob, attempt: int) -> list[dict[str, Any]]:
    """A container's envFrom that reads the attempt's ConfigMap."""
    return [{"configMapRef": {"name": attempt_env_name(job, attempt)}}]
