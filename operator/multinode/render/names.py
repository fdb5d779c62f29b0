"""Names, DNS names, labels and owner references of the objects a TrainingJob owns.

Node pods get hostname "<job>-<index>" and subdomain "<job>" (the headless
Service), so node i is reachable as "<job>-<i>.<job>.<namespace>.svc" whatever
its pod name; pod names add the attempt so a restarted gang never collides with
the old pods still terminating.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import (
    API_VERSION,
    APP_NAME_VALUE,
    KIND,
    LABEL_APP_NAME,
    LABEL_ATTEMPT,
    LABEL_JOB_NAME,
    LABEL_MANAGED_BY,
    LABEL_NODE_INDEX,
    MANAGED_BY_VALUE,
)
from multinode.api.constants import dns_name, spare_hostname
from multinode.api.constants import node_dns_name as api_node_dns_name


@dataclass(frozen=True)
class JobIdentity:
    """The metadata every rendered object needs; all three are set by the apiserver."""

    name: str
    namespace: str
    uid: str


def job_identity(job: TrainingJob) -> JobIdentity:
    meta = job.metadata
    name, namespace, uid = meta.name, meta.namespace, meta.uid
    if not (name and namespace and uid):
        missing = [field for field in ("name", "namespace", "uid") if not getattr(meta, field)]
        raise ValueError(f"TrainingJob metadata lacks {', '.join(missing)}; cannot render")
    return JobIdentity(name=name, namespace=namespace, uid=uid)


def job_name(job: TrainingJob) -> str:
    """The job's name, for renderers that need only it (job_identity checks namespace and uid too)."""
    name = job.metadata.name
    if not name:
        raise ValueError("TrainingJob metadata lacks name; cannot render")
    return name


def service_name(job_name: str) -> str:
    """The headless Service shares the job's name (the CRD keeps it a DNS-1035 label)."""
    return job_name


def pod_name(job_name: str, index: int, attempt: int) -> str:
    return f"{job_name}-{index}-a{attempt}"


def node_dns_name(job: TrainingJob, index: int) -> str:
    """Stable DNS name of node `index`, valid across attempts."""
    identity = job_identity(job)
    return api_node_dns_name(identity.name, index, service_name(identity.name), identity.namespace)


def leader_dns_name(job: TrainingJob, spare: int | None = None) -> str:
    """Rank 0's DNS name: node 0's, or that of the hot spare `spare` that took node 0's rank."""
    if spare is None:
        return node_dns_name(job, 0)
    identity = job_identity(job)
    return dns_name(spare_hostname(identity.name, spare), service_name(identity.name), identity.namespace)


def selector_labels(job_name: str) -> dict[str, str]:
    """Labels the headless Service selects on: every pod of the job, any attempt."""
    return {LABEL_JOB_NAME: job_name}


def common_labels(job_name: str) -> dict[str, str]:
    return {
        **selector_labels(job_name),
        LABEL_MANAGED_BY: MANAGED_BY_VALUE,
        LABEL_APP_NAME: APP_NAME_VALUE,
    }


def node_labels(job_name: str, index: int, attempt: int) -> dict[str, str]:
    return {
        **common_labels(job_name),
        LABEL_NODE_INDEX: str(index),
        LABEL_ATTEMPT: str(attempt),
    }


def owner_reference(job: TrainingJob) -> dict[str, Any]:
    """Makes the TrainingJob the controller of an object, so deleting the job deletes it."""
    identity = job_identity(job)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": identity.name,
        "uid": identity.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def check_node(job: TrainingJob, index: int, attempt: int) -> None:
    """Reject indexes outside the gang and negative attempts before naming anything after them."""
    if not 0 <= index < job.spec.num_nodes:
        raise ValueError(f"node index {index} outside 0..{job.spec.num_nodes - 1}")
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
