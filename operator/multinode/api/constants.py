"""Names the API, the operator and its pods agree on.

Kept in one module so that the CRD generator, the renderer and the controller
cannot drift apart on a label key or an environment variable name.
"""

from __future__ import annotations

from multinode.progress import ATTEMPT_FILE_ENV, MARKER, MARKER_ENV

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
# A hot spare's pod (spec.spareNodes): its serial number, which its name and hostname carry.
LABEL_SPARE = f"{GROUP}/spare"
# The rendezvous store's pod of an elastic job (spec.elastic): torchrun's c10d store, on no training node. Its
# value is the attempt the store serves.
LABEL_RENDEZVOUS_STORE = f"{GROUP}/rendezvous-store"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# The well-known node label whose value is the node's own: a topology key of one machine.
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_APP_NAME = "app.kubernetes.io/name"
MANAGED_BY_VALUE = "multinode"
APP_NAME_VALUE = "multinode-trainingjob"

# Kubernetes 1.36's native gang scheduling (alpha): a PodGroup per attempt, which the pods join through
# spec.schedulingGroup.podGroupName. The operator uses it only where the apiserver serves it (discovery).
POD_GROUP_API_GROUP = "scheduling.k8s.io"
POD_GROUP_API_VERSION = "v1alpha2"
POD_GROUP_PLURAL = "podgroups"
POD_GROUP_KIND = "PodGroup"
# Gang schedulers users run (spec.scheduling.volcano / coscheduling): each has a PodGroup kind of its own,
# which the operator creates per attempt, and a key on the pod that names the group. Checked against
# volcano.sh/apis v1.14.0 (scheduling/v1beta1: KubeGroupNameAnnotationKey) and sigs.k8s.io/scheduler-plugins
# v0.34.7 (apis/scheduling/v1alpha1: PodGroupLabel).
VOLCANO_API_GROUP = "scheduling.volcano.sh"
VOLCANO_API_VERSION = "v1beta1"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
DEFAULT_VOLCANO_SCHEDULER = "volcano"
COSCHEDULING_API_GROUP = "scheduling.x-k8s.io"
COSCHEDULING_API_VERSION = "v1alpha1"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

# Kueue (sigs.k8s.io/kueue) admits a job created suspended with the queue-name label by quota. The operator is
# the job's Kueue integration (what Kueue's jobframework is for its built-in kinds): it creates the job's
# Workload and starts or stops the job as Kueue admits or evicts it (integrations/kueue/). v1beta2 is the
# storage version of Kueue v0.17's CRDs (v1beta1 is served too, through Kueue's conversion webhook).
KUEUE_API_GROUP = "kueue.x-k8s.io"
KUEUE_API_VERSION = "v1beta2"
KUEUE_WORKLOAD_KIND = "Workload"
KUEUE_WORKLOAD_PLURAL = "workloads"
KUEUE_FLAVOR_PLURAL = "resourceflavors"
LABEL_KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
# The Workload's one podSet: numNodes pods like the node pod.
KUEUE_POD_SET = "node"

# Namespace labels (value "true") by which an admin lets a namespace's TrainingJobs, and the operator's pods
# there, have what the chart's admission policies refuse by default (docs/security.md). Only someone who may
# label namespaces can set them.
LABEL_ALLOW_HOST_PATH = f"{GROUP}/allow-host-path"
LABEL_ALLOW_HOST_NETWORK = f"{GROUP}/allow-host-network"
LABEL_ALLOW_INLINE_VOLUMES = f"{GROUP}/allow-inline-volumes"
LABEL_ALLOW_PRIVILEGED = f"{GROUP}/allow-privileged"
NAMESPACE_ALLOWANCES = (LABEL_ALLOW_HOST_PATH, LABEL_ALLOW_HOST_NETWORK, LABEL_ALLOW_INLINE_VOLUMES,
                        LABEL_ALLOW_PRIVILEGED)

# Multus reads this pod annotation to attach secondary (usually InfiniBand/RoCE) networks.
ANNOTATION_MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
# On a TrainingJob: `multinode checkpoint` writes a new value to ask the trainer for a checkpoint now.
ANNOTATION_CHECKPOINT_REQUEST = f"{GROUP}/checkpoint-request"
# On a node pod of a job with failurePolicy.restartStrategy InPlace (render/in_place.py): the attempt it runs
# now, the checkpoint that attempt resumes from and the job's counted restarts (its trainer reads these
# through the downward API at each start), and the trainer restart count the pod reaches once it has
# restarted into that attempt.
ANNOTATION_ATTEMPT = f"{GROUP}/attempt"
ANNOTATION_RESUME_FROM = f"{GROUP}/resume-from"
ANNOTATION_TRAINER_RESTARTS = f"{GROUP}/trainer-restarts"
ANNOTATION_RESTART_COUNT = f"{GROUP}/restart-count"
# ... and where the attempt's rendezvous is: the leader's DNS name (rank 0's pod, which a spare may hold), the
# port and the id. New with each attempt, so a pod cut off by a partition never rejoins a later one.
ANNOTATION_LEADER = f"{GROUP}/leader"
ANNOTATION_RENDEZVOUS_PORT = f"{GROUP}/rendezvous-port"
ANNOTATION_RENDEZVOUS_ID = f"{GROUP}/rendezvous-id"
# On a hot spare (spec.spareNodes, render/spare.py), once the operator gives it a lost node's rank: that node's
# index and the attempt it joined in. A spare without them waits, warm, in its preflight.
ANNOTATION_NODE_INDEX = f"{GROUP}/node-index"
ANNOTATION_JOINED_IN = f"{GROUP}/joined-in"
# Where each kubelet renews its node's Lease (every leaseDurationSeconds/4: 10 s on stock settings). A job with
# hot spares reads them: a node whose lease stops renewing loses its rank to a spare (reconcile/lease_loss.py).
NODE_LEASE_NAMESPACE = "kube-node-lease"
# Label published by NVIDIA GPU Feature Discovery; spec.accelerator selects on it.
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"

DEFAULT_GPU_RESOURCE_NAME = "nvidia.com/gpu"
DEFAULT_RDMA_RESOURCE_NAME = "rdma/hca_shared_devices_a"
DEFAULT_RENDEZVOUS_PORT = 29500

# The renderer owns the /dev/shm volume; users may not reuse its name or mount path.
SHM_VOLUME_NAME = "dshm"
SHM_MOUNT_PATH = "/dev/shm"

# Containers of the pods the operator renders; the planner reads their statuses by these names.
TRAINER_CONTAINER = "trainer"
PREFLIGHT_CONTAINER = "preflight"
MIRROR_CONTAINER = "mirror"
RENDEZVOUS_STORE_CONTAINER = "rendezvous-store"



def node_hostname(job: str, index: int) -> str:
    """The hostname of node `index`'s pod in every attempt (pod names add the attempt)."""
    return f"{job}-{index}"


def spare_hostname(job: str, serial: int) -> str:
    """The hostname of hot spare `serial` (spec.spareNodes): never a node's, whose suffix is digits only."""
    return f"{job}-s{serial}"


def rendezvous_store_hostname(job: str) -> str:
    """The hostname of an elastic job's rendezvous store (spec.elastic): never a node's or a spare's."""
    return f"{job}-rdzv"


def dns_name(hostname: str, service: str, namespace: str) -> str:
    """A pod's name under the job's headless Service (the pod's subdomain)."""
    return f"{hostname}.{service}.{namespace}.svc"


def node_dns_name(job: str, index: int, service: str, namespace: str) -> str:
    """Node `index` answers at this name (its hostname under the headless Service, the pod's subdomain)
    whatever its pod's name: the renderer publishes it and `multinode preflight` waits for it."""
    return dns_name(node_hostname(job, index), service, namespace)


# How long a node's preflight waits for its peers' DNS names: the operator's setting and the CLI's
# default.
DEFAULT_PREFLIGHT_TIMEOUT_SECONDS = 300
# spec.startupTimeoutSeconds' default: half an hour from the first pod bound to all running. A cold pull of
# the largest common training images (an NGC PyTorch image is ~10 GB compressed) takes minutes on a fast
# registry and up to ~20 on a slow one, plus the preflight's DNS wait (DEFAULT_PREFLIGHT_TIMEOUT_SECONDS at
# most); past that the pods' GPUs have been held for nothing long enough.
DEFAULT_STARTUP_TIMEOUT_SECONDS = 1800
# Prometheus /metrics of the operator (the chart's metrics.port) and of each job's mirror pod.
OPERATOR_METRICS_PORT = 8080
# The operator's /healthz (kopf's liveness endpoint on the leader, a standby's own): the chart's health.port,
# which must differ from the metrics port.
OPERATOR_HEALTH_PORT = 8081
MIRROR_METRICS_PORT = 9400
# The mirror's liveness endpoint, on its metrics port: 503 once it made no progress for MIRROR_STUCK_AFTER_SECONDS
# past the time its next pass was due (multinode.mirror.liveness).
MIRROR_HEALTH_PATH = "/healthz"
MIRROR_STUCK_AFTER_SECONDS = 600
# The value of MULTINODE_PROGRESS_MARKER (defined with the stdlib-only helper that prints it).
PROGRESS_MARKER = MARKER

# Every variable the operator sets in the trainer container, by the name it has there; the renderer, the
# planner (which reads MULTINODE_RESUME_FROM back) and the in-pod CLIs read the names from here.
# The taints the node lifecycle controller puts on a node whose Ready condition is False (not-ready) or
# Unknown (unreachable: no heartbeat); NoExecute evicts pods that do not tolerate them.
TAINT_NODE_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_NODE_UNREACHABLE = "node.kubernetes.io/unreachable"

# Consecutive attempts get different rendezvous ports (MASTER_PORT = rendezvousPort + attempt mod this), so a
# pod of an earlier attempt that outlived a partition cannot join the new attempt's rendezvous.
RENDEZVOUS_PORT_SPAN = 4


class EnvName:
    # torchrun / Kubeflow v1 style
    MASTER_ADDR = "MASTER_ADDR"
    MASTER_PORT = "MASTER_PORT"
    NNODES = "NNODES"
    NODE_RANK = "NODE_RANK"
    NPROC_PER_NODE = "NPROC_PER_NODE"
    WORLD_SIZE = "WORLD_SIZE"
    # torchrun reads PET_<FLAG> as the default of --<flag>
    PET_NNODES = "PET_NNODES"
    PET_NODE_RANK = "PET_NODE_RANK"
    PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
    PET_MASTER_ADDR = "PET_MASTER_ADDR"
    PET_MASTER_PORT = "PET_MASTER_PORT"
    PET_RDZV_ID = "PET_RDZV_ID"
    # spec.elastic: torchrun's c10d rendezvous on the job's store pod, and this node's own address in it
    PET_RDZV_BACKEND = "PET_RDZV_BACKEND"
    PET_RDZV_ENDPOINT = "PET_RDZV_ENDPOINT"
    PET_RDZV_CONF = "PET_RDZV_CONF"
    PET_MAX_RESTARTS = "PET_MAX_RESTARTS"
    PET_LOCAL_ADDR = "PET_LOCAL_ADDR"
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
    MULTINODE_MIN_NODES = "MULTINODE_MIN_NODES"
    MULTINODE_RENDEZVOUS_STORE_PORT = "MULTINODE_RENDEZVOUS_STORE_PORT"
    # multinode's own
    MULTINODE_JOB_NAME = "MULTINODE_JOB_NAME"
    MULTINODE_NAMESPACE = "MULTINODE_NAMESPACE"
    MULTINODE_NODE_INDEX = "MULTINODE_NODE_INDEX"
    MULTINODE_ATTEMPT = "MULTINODE_ATTEMPT"
    MULTINODE_RDZV_ID = "MULTINODE_RDZV_ID"
    MULTINODE_SERVICE = "MULTINODE_SERVICE"
    MULTINODE_POD_NAME = "MULTINODE_POD_NAME"
    MULTINODE_HOST_NODE = "MULTINODE_HOST_NODE"
    # Baseten Training compatible
    BT_TRAINING_JOB_NAME = "BT_TRAINING_JOB_NAME"
    BT_NODE_RANK = "BT_NODE_RANK"
    BT_GROUP_SIZE = "BT_GROUP_SIZE"
    BT_LEADER_ADDR = "BT_LEADER_ADDR"
    BT_NUM_GPUS = "BT_NUM_GPUS"
    PYTHONUNBUFFERED = "PYTHONUNBUFFERED"
    # The heartbeat marker multinode.progress prints and the operator looks for in the trainer's log.
    MULTINODE_PROGRESS_MARKER = MARKER_ENV
    # restarts, the shared cache and checkpoints (set when spec.cache / spec.checkpointing are)
    MULTINODE_RESTART_COUNT = "MULTINODE_RESTART_COUNT"
    BT_RETRY_COUNT = "BT_RETRY_COUNT"
    MULTINODE_CACHE_DIR = "MULTINODE_CACHE_DIR"
    MULTINODE_JOB_CACHE_DIR = "MULTINODE_JOB_CACHE_DIR"
    BT_PROJECT_CACHE_DIR = "BT_PROJECT_CACHE_DIR"
    MULTINODE_CHECKPOINT_DIR = "MULTINODE_CHECKPOINT_DIR"
    MULTINODE_CHECKPOINT_REQUEST_FILE = "MULTINODE_CHECKPOINT_REQUEST_FILE"
    # restartStrategy InPlace: the pod's current attempt, a downward API file (multinode.progress reads it).
    MULTINODE_ATTEMPT_FILE = ATTEMPT_FILE_ENV
    BT_CHECKPOINT_DIR = "BT_CHECKPOINT_DIR"
    MULTINODE_MIRROR_DIR = "MULTINODE_MIRROR_DIR"
    MULTINODE_RESUME_FROM = "MULTINODE_RESUME_FROM"
    BT_LOAD_CHECKPOINT_DIR = "BT_LOAD_CHECKPOINT_DIR"
    # from spec.network.nccl
    NCCL_SOCKET_IFNAME = "NCCL_SOCKET_IFNAME"
    NCCL_IB_HCA = "NCCL_IB_HCA"
    NCCL_DEBUG = "NCCL_DEBUG"
    NCCL_DEBUG_SUBSYS = "NCCL_DEBUG_SUBSYS"


# Users may not set these in spec.env (the CRD rejects them): two definitions of MASTER_ADDR in one
# container would leave the effective value up to list order. The NCCL_* ones are set only when
# spec.network.nccl asks for them, but they are reserved unconditionally so that there is exactly one way
# to configure each.
RESERVED_ENV_NAMES: frozenset[str] = frozenset(
    value for key, value in vars(EnvName).items() if not key.startswith("_")
)
