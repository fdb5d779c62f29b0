"""Environment of a node's containers: the rendezvous contract of docs/env.md.

One set of facts is published under the names each launcher already reads:
torchrun flags (PET_*), Kubeflow v1 style (MASTER_ADDR, NODE_RANK, ...), Baseten
Training (BT_*) and multinode's own (MULTINODE_*). Every name set here must be in
multinode.api.RESERVED_ENV_NAMES, which the CRD refuses in spec.env.
"""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob, effective_num_proc_per_node, world_size
from multinode.api.constants import PROGRESS_MARKER, RENDEZVOUS_PORT_SPAN, EnvName
from multinode.render.names import check_node, job_identity, node_dns_name, service_name
from multinode.render.storage import storage_env


MAX_PORT = 65535


def _value(name: str, value: object) -> dict[str, Any]:
    return {"name": name, "value": str(value)}


def _field_ref(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def rendezvous_port(base: int, attempt: int) -> int:
    """MASTER_PORT of `attempt`: base + attempt mod RENDEZVOUS_PORT_SPAN, counted down from base near the
    top of the port range. The leader's DNS name is the same in every attempt, so the port is what fences
    off a pod of an earlier attempt that comes back from a partition: it knocks on a port nobody listens on."""
    offset = attempt % RENDEZVOUS_PORT_SPAN
    return base + offset if base + offset <= MAX_PORT else base - offset


def rendezvous_id(job_uid: str, attempt: int) -> str:
    """One id per attempt of one job object: a job deleted and created again under its name gets new ones."""
    return f"{job_uid}-a{attempt}"


def operator_env(
    job: TrainingJob, index: int, attempt: int, *, restarts: int = 0, resume_from: str = ""
) -> list[dict[str, Any]]:
    """Variables multinode sets on node `index` of `attempt`, without the user's."""
    check_node(job, index, attempt)
    spec = job.spec
    identity = job_identity(job)
    leader = node_dns_name(job, 0)
    port = rendezvous_port(spec.network.rendezvous_port, attempt)
    rdzv_id = rendezvous_id(identity.uid, attempt)
    nodes = spec.num_nodes
    procs = effective_num_proc_per_node(spec)

    env = [
        _value(EnvName.MASTER_ADDR, leader),
        _value(EnvName.MASTER_PORT, port),
        _value(EnvName.NNODES, nodes),
        _value(EnvName.NODE_RANK, index),
        _value(EnvName.NPROC_PER_NODE, procs),
        # Total processes, not pods (Kubeflow v1 sets the pod count here).
        _value(EnvName.WORLD_SIZE, world_size(spec)),
        # torchrun takes the default of every --flag from PET_<FLAG>, so a bare
        # `torchrun train.py` joins the gang with no arguments.
        _value(EnvName.PET_NNODES, nodes),
        _value(EnvName.PET_NODE_RANK, index),
        _value(EnvName.PET_NPROC_PER_NODE, procs),
        _value(EnvName.PET_MASTER_ADDR, leader),
        _value(EnvName.PET_MASTER_PORT, port),
        # torchrun's --rdzv-id: a c10d rendezvous of one attempt never admits another attempt's node.
        _value(EnvName.PET_RDZV_ID, rdzv_id),
        _value(EnvName.MULTINODE_JOB_NAME, identity.name),
        _value(EnvName.MULTINODE_NAMESPACE, identity.namespace),
        _value(EnvName.MULTINODE_NODE_INDEX, index),
        _value(EnvName.MULTINODE_ATTEMPT, attempt),
        _value(EnvName.MULTINODE_RDZV_ID, rdzv_id),
        _value(EnvName.MULTINODE_SERVICE, service_name(identity.name)),
        _field_ref(EnvName.MULTINODE_POD_NAME, "metadata.name"),
        _field_ref(EnvName.MULTINODE_HOST_NODE, "spec.nodeName"),
        # Baseten Training names, so scripts written for it run unchanged.
        _value(EnvName.BT_TRAINING_JOB_NAME, identity.name),
        _value(EnvName.BT_NODE_RANK, index),
        _value(EnvName.BT_GROUP_SIZE, nodes),
        _value(EnvName.BT_LEADER_ADDR, leader),
        _value(EnvName.BT_NUM_GPUS, spec.resources_per_node.gpus),
        # Without it Python buffers stdout and a hung rank's last words never reach the logs.
        _value(EnvName.PYTHONUNBUFFERED, 1),
        # Set on every job, so a trainer's heartbeats (multinode.progress) show whether or not hang
        # detection is on; the operator reads them only with spec.hangDetection.
        _value(EnvName.MULTINODE_PROGRESS_MARKER, PROGRESS_MARKER),
    ]
    env.extend(_value(name, value) for name, value in storage_env(job, restarts=restarts, resume_from=resume_from))
    env.extend(_nccl_env(job))
    return env


def _nccl_env(job: TrainingJob) -> list[dict[str, Any]]:
    nccl = job.spec.network.nccl
    if nccl is None:
        return []
    pairs = [
        (EnvName.NCCL_SOCKET_IFNAME, nccl.socket_ifname),
        (EnvName.NCCL_IB_HCA, nccl.ib_hca),
        (EnvName.NCCL_DEBUG, nccl.debug),
        (EnvName.NCCL_DEBUG_SUBSYS, nccl.debug_subsys),
    ]
    return [_value(name, value) for name, value in pairs if value is not None]


def user_env(job: TrainingJob) -> list[dict[str, Any]]:
    return [var.model_dump(by_alias=True, exclude_none=True) for var in job.spec.env or []]
