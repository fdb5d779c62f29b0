"""Names the API, the operator and its pods agree on.

Kept in one module so that the CRD generator, the renderer and the controller
cannot drift apart on a label key or an environment variable name.
"""

from __future__ import annotations

GROUP = "multinode.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainingJob"
LIST_KIND = "TrainingJobList"
PLURAL = "trainingjobs"
SINGULAR = "trainingjob"
SHORT_NAMES = ("tj",)
CRD_NAME = f"{PLURAL}.{GROUP}"

# Labels the operator puts on every object it creates; the headless Service
# selects pods by LABEL_JOB_NAME only, so every attempt's pods share one DNS domain.
LABEL_JOB_NAME = f"{GROUP}/job-name"
LABEL_NODE_INDEX = f"{GROUP}/node-index"
LABEL_ATTEMPT = f"{GROUP}/attempt"
# The mirror pod is labelled apart from node pods, so the headless Service (which selects
# LABEL_JOB_NAME) never lists it among the rendezvous peers.
LABEL_MIRROR_OF = f"{GROUP}/mirror-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_APP_NAME = "app.kubernetes.io/name"
MANAGED_BY_VALUE = "multinode"
APP_NAME_VALUE = "multinode-trainingjob"

# Multus reads this pod annotation to attach secondary (usually InfiniBand/RoCE) networks.
ANNOTATION_MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
# Label published by NVIDIA GPU Feature Discovery; spec.accelerator selects on it.
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"

DEFAULT_GPU_RESOURCE_NAME = "nvidia.com/gpu"
DEFAULT_RDMA_RESOURCE_NAME = "rdma/hca_shared_devices_a"
DEFAULT_RENDEZVOUS_PORT = 29500

# The renderer owns the /dev/shm volume; users may not reuse its name or mount path.
SHM_VOLUME_NAME = "dshm"
SHM_MOUNT_PATH = "/dev/shm"

CONDITION_CREATED = "Created"
CONDITION_RUNNING = "Running"
CONDITION_SUCCEEDED = "Succeeded"
CONDITION_FAILED = "Failed"
# False while training has ended and the mirror's final sync runs; True once it is done.
CONDITION_CHECKPOINTS_SYNCED = "CheckpointsSynced"

# Every variable the operator sets in the trainer container. Users may not set these
# in spec.env (the CRD rejects them): two definitions of MASTER_ADDR in one container
# would leave the effective value up to list order. The NCCL_* ones are set only when
# spec.network.nccl asks for them, but they are reserved unconditionally so that
# there is exactly one way to configure each.
RESERVED_ENV_NAMES: frozenset[str] = frozenset(
    {
        # torchrun / Kubeflow v1 style
        "MASTER_ADDR",
        "MASTER_PORT",
        "NNODES",
        "NODE_RANK",
        "NPROC_PER_NODE",
        "WORLD_SIZE",
        # torchrun reads PET_<FLAG> as the default of --<flag>
        "PET_NNODES",
        "PET_NODE_RANK",
        "PET_NPROC_PER_NODE",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
        # multinode's own
        "MULTINODE_JOB_NAME",
        "MULTINODE_NAMESPACE",
        "MULTINODE_NODE_INDEX",
        "MULTINODE_ATTEMPT",
        "MULTINODE_SERVICE",
        "MULTINODE_POD_NAME",
        "MULTINODE_HOST_NODE",
        # Baseten Training compatible
        "BT_TRAINING_JOB_NAME",
        "BT_NODE_RANK",
        "BT_GROUP_SIZE",
        "BT_LEADER_ADDR",
        "BT_NUM_GPUS",
        "PYTHONUNBUFFERED",
        # restarts, the shared cache and checkpoints (set when spec.cache / spec.checkpointing are)
        "MULTINODE_RESTART_COUNT",
        "BT_RETRY_COUNT",
        "MULTINODE_CACHE_DIR",
        "MULTINODE_JOB_CACHE_DIR",
        "BT_PROJECT_CACHE_DIR",
        "MULTINODE_CHECKPOINT_DIR",
        "BT_CHECKPOINT_DIR",
        "MULTINODE_MIRROR_DIR",
        "MULTINODE_RESUME_FROM",
        "BT_LOAD_CHECKPOINT_DIR",
        # from spec.network.nccl
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_HCA",
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
    }
)
