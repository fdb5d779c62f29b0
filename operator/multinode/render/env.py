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
from multinode.render.elastic_env import elastic_attempt_env
from multinode.render.storage import storage_env


MAX_PORT = 65535


def _value(name: str, value: object) -> dict[str, Any]:
    return {"name": name, "value": str(value)}


def field_ref(name: str, field_path: str) -> dict[str, Any]:
    """A variable the kubelet fills from the pod's own fields (the downward API), at each container start."""
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


# Per pod: what differs between the pods of one attempt. Everything else a pod's trainer sees from
# multinode is the same for every pod of the attempt and lives in the attempt's ConfigMap (attempt_env,
# render/attempt_env.py), read through envFrom: at 1000 nodes that is 1000 copies fewer of ~1.3 KB that the
# apiserver stores twice per pod (spec and managedFields) and every watcher decodes on every pod event.
# The checkpoint to resume from stays per pod too: the planner reads it back from the pods it observes.
PER_POD_STORAGE_ENV = frozenset({EnvName.MULTINODE_RESUME_FROM, EnvName.BT_LOAD_CHECKPOINT_DIR})


def pod_identity_env() -> list[dict[str, Any]]:
    """The pod's name and its node's, through the downward API."""
    return [field_ref(EnvName.MULTINODE_POD_NAME, "metadata.name"),
            field_ref(EnvName.MULTINODE_HOST_NODE, "spec.nodeName")]


def node_env(job: TrainingJob, index: int, *, resume_from: str = "") -> list[dict[str, Any]]:
    """The variables of node `index` that its pod carries inline (the rest come from attempt_env)."""
    check_node(job, index, 0)
    env = [
        _value(EnvName.NODE_RANK, index),
        _value(EnvName.PET_NODE_RANK, index),
        _value(EnvName.MULTINODE_NODE_INDEX, index),
        _value(EnvName.BT_NODE_RANK, index),
        *pod_identity_env(),
    ]
    if job.spec.elastic is not None:  # the node's own address in the c10d rendezvous (resolvable by its peers)
        env.append(_value(EnvName.PET_LOCAL_ADDR, node_dns_name(job, index)))
    env.extend(_value(name, value) for name, value in storage_env(job, restarts=0, resume_from=resume_from)
               if name in PER_POD_STORAGE_ENV)
    return env


def attempt_env(job: TrainingJob, attempt: int, *, restarts: int = 0) -> dict[str, str]:
    """The variables shared by every pod of `attempt`, name → value: the data of the attempt's ConfigMap.
    Per attempt, not per job: the rendezvous port and id change with each attempt, and a pod of an older
    attempt must never read a newer attempt's values."""
    check_node(job, 0, attempt)
    spec = job.spec
    identity = job_identity(job)
    leader = node_dns_name(job, 0)
    port = rendezvous_port(spec.network.rendezvous_port, attempt)
    rdzv_id = rendezvous_id(identity.uid, attempt)
    nodes = spec.num_nodes
    procs = effective_num_proc_per_node(spec)
    pairs: list[tuple[str, object]] = [
        (EnvName.MASTER_ADDR, leader),
        (EnvName.MASTER_PORT, port),
        (EnvName.NNODES, nodes),
        (EnvName.NPROC_PER_NODE, procs),
        # Total processes, not pods (Kubeflow v1 sets the pod count here).
        (EnvName.WORLD_SIZE, world_size(spec)),
        # torchrun takes the default of every --flag from PET_<FLAG>, so a bare
        # `torchrun train.py` joins the gang with no arguments.
        (EnvName.PET_NNODES, nodes),
        (EnvName.PET_NPROC_PER_NODE, procs),
        (EnvName.PET_MASTER_ADDR, leader),
        (EnvName.PET_MASTER_PORT, port),
        # torchrun's --rdzv-id: a c10d rendezvous of one attempt never admits another attempt's node.
        (EnvName.PET_RDZV_ID, rdzv_id),
        (EnvName.MULTINODE_JOB_NAME, identity.name),
        (EnvName.MULTINODE_NAMESPACE, identity.namespace),
        (EnvName.MULTINODE_ATTEMPT, attempt),
        (EnvName.MULTINODE_RDZV_ID, rdzv_id),
        (EnvName.MULTINODE_SERVICE, service_name(identity.name)),
        # Baseten Training names, so scripts written for it run unchanged.
        (EnvName.BT_TRAINING_JOB_NAME, identity.name),
        (EnvName.BT_GROUP_SIZE, nodes),
        (EnvName.BT_LEADER_ADDR, leader),
        (EnvName.BT_NUM_GPUS, spec.resources_per_node.gpus),
        # Without it Python buffers stdout and a hung rank's last words never reach the logs.
        (EnvName.PYTHONUNBUFFERED, 1),
        # Set on every job, so a trainer's heartbeats (multinode.progress) show whether or not hang
        # detection is on; the operator reads them only with spec.hangDetection.
        (EnvName.MULTINODE_PROGRESS_MARKER, PROGRESS_MARKER),
    ]
    pairs.extend((name, value) for name, value in storage_env(job, restarts=restarts, resume_from="")
                 if name not in PER_POD_STORAGE_ENV)
    pairs.extend(_nccl_pairs(job))
    # Last: an elastic job's torchrun flags replace the static ones (PET_NNODES min:max, the rendezvous).
    pairs.extend(elastic_attempt_env(job, rdzv_id, port))
    return {str(name): str(value) for name, value in pairs}


def operator_env(
    job: TrainingJob, index: int, attempt: int, *, restarts: int = 0, resume_from: str = ""
) -> list[dict[str, Any]]:
    """Every variable multinode gives node `index` of `attempt`, without the user's: the attempt's shared
    ones (its ConfigMap) and the node's own (inline in its pod). What the trainer process sees."""
    check_node(job, index, attempt)
    shared = [_value(name, value) for name, value in attempt_env(job, attempt, restarts=restarts).items()]
    return shared + node_env(job, index, resume_from=resume_from)


def _nccl_pairs(job: TrainingJob) -> list[tuple[str, object]]:
    nccl = job.spec.network.nccl
    if nccl is None:
        return []
    pairs = [
        (EnvName.NCCL_SOCKET_IFNAME, nccl.socket_ifname),
        (EnvName.NCCL_IB_HCA, nccl.ib_hca),
        (EnvName.NCCL_DEBUG, nccl.debug),
        (EnvName.NCCL_DEBUG_SUBSYS, nccl.debug_subsys),
    ]
    return [(name, value) for name, value in pairs if value is not None]


def user_env(job: TrainingJob) -> list[dict[str, Any]]:
    return [var.model_dump(by_alias=True, exclude_none=True) for var in job.spec.env or []]
