"""TrainingJob spec: what the user asks for.

Field names follow the peers users already know: numNodes/numProcPerNode from
Kubeflow Trainer v2, successPolicy from JobSet, and env variables compatible with
torchrun and Baseten Training (docs/api.md maps each field to its peers).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from multinode.api.base import (
    DNS1123_SUBDOMAIN_PATTERN,
    MAX_MAP_ENTRIES,
    MAX_NAME_LENGTH,
    MAX_PATH_LENGTH,
    QUALIFIED_NAME_PATTERN,
    AnnotationValue,
    ApiModel,
    DnsSubdomain,
    LabelValue,
    Quantity,
    Text,
)
from multinode.api.cel import add_rules, cel_rule, immutable_fields_rules
from multinode.api.checkpointing import CacheSpec, CheckpointingSpec
from multinode.api.elastic import ElasticSpec
from multinode.api.health_check import HealthCheckSpec
from multinode.api.lifecycle import CleanPodPolicy, FailurePolicy, ImageConsistency, PodGroup, Topology
from multinode.api.network import NetworkSpec
from multinode.api.progress import HangDetection
from multinode.api.scheduling import SchedulingSpec
from multinode.api.security import ContainerSecurityContext, PodSecurityContext
from multinode.api.constants import (
    DEFAULT_STARTUP_TIMEOUT_SECONDS,
    DEFAULT_GPU_RESOURCE_NAME,
)
from multinode.api.pod_fields import (
    Affinity,
    EnvVar,
    LocalObjectReference,
    Toleration,
    Volume,
    VolumeMount,
)

# A CRD default of {} makes the apiserver create the object and then fill in its
# nested defaults, so stored objects show the same values the Python models assume.
_DEFAULT_EMPTY_OBJECT: JsonDict = {"default": {}}

MAX_NUM_NODES = 20000
MAX_SPARE_NODES = 1000
# A day: room for a trainer that saves a very large checkpoint on SIGTERM (Kubernetes itself sets no bound).
MAX_TERMINATION_GRACE_SECONDS = 86400

def _list_map(*keys: str) -> dict[str, Any]:
    """Schema markers for a list merged by key (server-side apply; duplicates rejected)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


class SuccessPolicy(StrEnum):
    """When a TrainingJob counts as succeeded."""

    ALL_NODES = "AllNodes"
    LEADER_ONLY = "LeaderOnly"


class ResourcesPerNode(ApiModel):
    """Resources of the trainer container on each node (one pod per node)."""

    gpus: int = Field(0, ge=0, description="GPUs per node; 0 runs a CPU-only job.")
    gpu_resource_name: str = Field(
        DEFAULT_GPU_RESOURCE_NAME,
        max_length=MAX_NAME_LENGTH,
        pattern=QUALIFIED_NAME_PATTERN,
        description="Extended resource name the GPUs are requested under.",
    )
    cpu: Quantity | None = Field(
        None, description="CPU quantity, set as both request and limit (for example \"32\")."
    )
    memory: Quantity | None = Field(
        None, description="Memory quantity, set as both request and limit (for example 256Gi)."
    )


class PodTemplate(ApiModel):
    """Fields copied onto every node pod. Everything else about the pod is multinode's."""

    labels: dict[str, LabelValue] | None = Field(
        None,
        max_length=MAX_MAP_ENTRIES,
        description="Extra pod labels; multinode's own labels win on conflict.",
    )
    annotations: dict[str, AnnotationValue] | None = Field(
        None, max_length=MAX_MAP_ENTRIES,
        description="Extra pod annotations; not multinode.dev/ ones, which the operator writes and reads back.",
        json_schema_extra={"x-kubernetes-validations": [cel_rule(
            "self.all(k, !k.startsWith('multinode.dev/'))",
            "spec.podTemplate.annotations: multinode.dev/ annotations are the operator's own (an in-place "
            "restart's attempt and resume path live there)")]},
    )
    node_selector: dict[str, LabelValue] | None = Field(
        None,
        max_length=MAX_MAP_ENTRIES,
        description="Node labels every pod requires (merged with spec.accelerator).",
    )
    tolerations: list[Toleration] | None = Field(
        None, max_length=64, description="Taints the pods tolerate."
    )
    affinity: Affinity | None = Field(
        None,
        description="A core/v1 Affinity, copied to every node pod, with the operator's terms added: a required "
                    "pod anti-affinity on kubernetes.io/hostname against the attempt's other node pods (one pod "
                    "per node), and a required node selector term keeping pods off status.excludedNodes.",
    )
    priority_class_name: DnsSubdomain | None = Field(
        None, description="PriorityClass of the pods (a DNS-1123 subdomain: lowercase letters, digits, '-', '.')."
    )
    scheduler_name: DnsSubdomain | None = Field(
        None,
        description="Scheduler for the pods (for example a gang scheduler); a DNS-1123 subdomain.",
    )
    service_account_name: DnsSubdomain | None = Field(
        None, description="ServiceAccount the pods run as (a DNS-1123 subdomain)."
    )
    automount_service_account_token: bool = Field(
        False,
        description="Mount the ServiceAccount's token into the node pods. Off unless asked: a trainer that does "
                    "not call the Kubernetes API holds no credentials for it.",
    )
    security_context: PodSecurityContext | None = Field(
        None,
        description="The node pods' security context. runAsNonRoot with seccompProfile RuntimeDefault is all a "
                    "job needs to meet Pod Security `restricted`.",
    )
    container_security_context: ContainerSecurityContext | None = Field(
        None,
        description="The trainer container's security context; multinode's defaults (no privilege escalation, "
                    "every capability dropped, IPC_LOCK with RDMA) fill what is unset.",
    )
    termination_grace_period_seconds: int | None = Field(
        None, ge=0, le=MAX_TERMINATION_GRACE_SECONDS,
        description="Seconds a node pod has from SIGTERM to SIGKILL when it is deleted (a gang restart, a node "
                    "shed, the job deleted); Kubernetes' 30 when unset. Raise it for a trainer that saves a "
                    "checkpoint on SIGTERM; lower it for one that is its container's PID 1 without a SIGTERM "
                    "handler (`python train.py`), which ignores the signal and waits all of it at every restart.",
    )
    runtime_class_name: str | None = Field(
        None, max_length=MAX_NAME_LENGTH, pattern=DNS1123_SUBDOMAIN_PATTERN,
        description="RuntimeClass of the node pods (a sandboxed or GPU runtime).",
    )
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        None,
        max_length=32,
        description="Secrets for pulling the trainer image.",
        json_schema_extra=_list_map("name"),
    )
    volumes: list[Volume] | None = Field(
        None,
        max_length=128,
        description="Extra pod volumes (core/v1 Volume).",
        json_schema_extra=_list_map("name"),
    )
    volume_mounts: list[VolumeMount] | None = Field(
        None,
        max_length=128,
        description="Mounts of those volumes into the trainer container.",
        json_schema_extra=_list_map("mountPath"),
    )


# Rules between spec fields; each names the field it is about.
_NO_GANG_SCHEDULER = ("(!has(self.scheduling) || (!has(self.scheduling.volcano) && "
                      "!has(self.scheduling.coscheduling)))")
CROSS_FIELD_RULES = [
    cel_rule("!has(self.checkpointing) || has(self.cache)",
             "spec.checkpointing requires spec.cache: checkpoints are mirrored from the shared cache",
             field_path=".checkpointing"),
    cel_rule("!has(self.checkpointing) || !has(self.cache) || self.checkpointing.mountPath != self.cache.mountPath",
             "spec.checkpointing.mountPath must differ from spec.cache.mountPath",
             field_path=".checkpointing.mountPath"),
    # One gang: the deprecated spec.podGroup (labels only) or a named gang scheduler, which both join the pods.
    cel_rule(f"!has(self.podGroup) || {_NO_GANG_SCHEDULER}",
             "spec.podGroup is deprecated and cannot be combined with spec.scheduling.volcano or "
             "spec.scheduling.coscheduling: remove spec.podGroup", field_path=".podGroup"),
    # A spare joins a gang whose other pods restart in place; a gang recreated whole has no use for one.
    cel_rule("!has(self.spareNodes) || self.spareNodes == 0 || !has(self.failurePolicy) || "
             "!has(self.failurePolicy.restartStrategy) || self.failurePolicy.restartStrategy == 'InPlace'",
             "spec.spareNodes needs spec.failurePolicy.restartStrategy InPlace (or unset): a spare takes a lost "
             "node's rank while the other pods restart in place", field_path=".spareNodes"),
    cel_rule("!has(self.spareNodes) || self.spareNodes <= self.numNodes",
             "spec.spareNodes must be at most spec.numNodes", field_path=".spareNodes"),
    cel_rule("!has(self.elastic) || self.elastic.minNodes <= self.numNodes",
             "spec.elastic.minNodes must be at most spec.numNodes", field_path=".elastic.minNodes"),
    cel_rule("!has(self.elastic) || !has(self.elastic.maxNodes) || self.elastic.maxNodes == self.numNodes",
             "spec.elastic.maxNodes must equal spec.numNodes (the job's full size) when given",
             field_path=".elastic.maxNodes"),
    # An elastic job's resizes already restart its ranks in place (torchrun's agent, in pods that stay); a
    # spare, and the operator's in-place restarts, would be a second mechanism racing the rendezvous.
    cel_rule("!has(self.elastic) || !has(self.failurePolicy) || !has(self.failurePolicy.restartStrategy) || "
             "self.failurePolicy.restartStrategy != 'InPlace'",
             "spec.elastic cannot be combined with failurePolicy.restartStrategy InPlace: an elastic job's ranks "
             "restart in place at every resize already (torchrun's agent)", field_path=".elastic"),
    cel_rule("!has(self.elastic) || !has(self.spareNodes) || self.spareNodes == 0",
             "spec.elastic cannot be combined with spec.spareNodes: an elastic job trains on without a lost node "
             "and takes it back when it returns", field_path=".spareNodes"),
    cel_rule(f"!has(self.podTemplate) || !has(self.podTemplate.schedulerName) || {_NO_GANG_SCHEDULER}",
             "spec.podTemplate.schedulerName cannot be combined with a gang scheduler: set "
             "spec.scheduling.volcano.schedulerName or spec.scheduling.coscheduling.schedulerName",
             field_path=".podTemplate.schedulerName"),
]


def _add_spec_rules(schema: dict[str, Any], model: type[TrainingJobSpec]) -> None:
    fields = [
        field.alias or name
        for name, field in model.model_fields.items()
        if name not in model.MUTABLE_FIELDS
    ]
    add_rules(schema, CROSS_FIELD_RULES)
    add_rules(schema, immutable_fields_rules(fields, "spec"))


class TrainingJobSpec(ApiModel):
    """Desired state of a TrainingJob."""

    # Fields that may change after creation (by Python name): the lifecycle knobs. Everything
    # that shapes the pods is frozen: a running gang cannot take a new image or node count without
    # a restart, and silently ignoring an edit is worse than rejecting it.
    MUTABLE_FIELDS: ClassVar[frozenset[str]] = frozenset(
        {"suspend", "active_deadline_seconds", "ttl_seconds_after_finished", "failure_policy", "hang_detection",
         "scheduling"}
    )

    model_config = ConfigDict(json_schema_extra=_add_spec_rules)

    # Bounded so a typo (10^9) cannot make the operator render a billion pods. The status does not grow with
    # it: status.nodeStatuses holds at most MAX_NODE_STATUSES rows, status.nodeCounts counts the rest.
    num_nodes: int = Field(ge=1, le=MAX_NUM_NODES, description="Number of nodes (one pod per node).")
    spare_nodes: int = Field(
        0, ge=0, le=MAX_SPARE_NODES,
        description="Hot spares: this many extra pods, each on a node of its own, scheduled, pulled and past "
                    "their health check, waiting. When a node of the gang is lost, a spare takes its rank (rank "
                    "0's too) while the other pods restart in place, and a new spare is made. At most numNodes; "
                    "needs failurePolicy.restartStrategy InPlace (docs/operations.md#hot-spares).")
    elastic: ElasticSpec | None = Field(
        None, description="Go on training on fewer nodes after a node is lost (down to minNodes) and grow back to "
                          "numNodes when capacity returns, with torchrun's c10d rendezvous on a store pod of its "
                          "own (docs/operations.md#elastic-jobs). Not with restartStrategy InPlace.")
    num_proc_per_node: int | None = Field(
        None,
        ge=1,
        description=(
            "Processes per node (torchrun --nproc-per-node). Default: resourcesPerNode.gpus "
            "when above 0, else 1."
        ),
    )
    image: str = Field(min_length=1, max_length=1024, description="Trainer container image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None,
        description="Pull policy of the trainer image (Kubernetes default applies when unset).",
    )
    command: list[Text] | None = Field(
        None, max_length=256, description="Entrypoint; the image's ENTRYPOINT when unset."
    )
    args: list[Text] | None = Field(
        None, max_length=1024, description="Arguments; the image's CMD when unset."
    )
    working_dir: str | None = Field(None, max_length=MAX_PATH_LENGTH, description="Working directory of the trainer.")
    env: list[EnvVar] | None = Field(
        None,
        max_length=512,
        description=(
            "Extra environment variables, set after multinode's own, so values can refer to "
            "them as $(MASTER_ADDR)."
        ),
        json_schema_extra=_list_map("name"),
    )
    resources_per_node: ResourcesPerNode = Field(
        default_factory=ResourcesPerNode,
        description="GPUs, CPU and memory of each node's trainer container.",
        json_schema_extra=_DEFAULT_EMPTY_OBJECT,
    )
    accelerator: LabelValue | None = Field(
        None,
        min_length=1,
        description=(
            "GPU model, matched against the nvidia.com/gpu.product node label, for example "
            "NVIDIA-H100-80GB-HBM3."
        ),
    )
    shm_size: Quantity | None = Field(
        None,
        description=(
            "Size limit of /dev/shm (always a memory volume; the container default of 64M "
            "stalls NCCL). Unlimited when unset; counts against memory."
        ),
    )
    network: NetworkSpec = Field(
        default_factory=NetworkSpec,
        description="Rendezvous port, host network, Multus, RDMA and NCCL settings.",
        json_schema_extra=_DEFAULT_EMPTY_OBJECT,
    )
    success_policy: SuccessPolicy = Field(
        SuccessPolicy.ALL_NODES,
        description="AllNodes: every node must exit 0. LeaderOnly: node 0 exiting 0 suffices.",
    )
    pod_template: PodTemplate = Field(
        default_factory=PodTemplate,
        description="Labels, scheduling and volumes copied onto every node pod.",
        json_schema_extra=_DEFAULT_EMPTY_OBJECT,
    )
    cache: CacheSpec | None = Field(
        None, description="Shared cache (a ReadWriteMany PVC) mounted on every node; not backed up."
    )
    checkpointing: CheckpointingSpec | None = Field(
        None,
        description=(
            "Mirror complete checkpoints from the job's cache directory into a backed-up volume, and "
            "resume restarts from the latest one. Needs spec.cache."
        ),
    )
    failure_policy: FailurePolicy = Field(
        default_factory=FailurePolicy,
        description="Gang restarts: budget, strategy, backoff and rules. May be changed while the job runs.",
        json_schema_extra=_DEFAULT_EMPTY_OBJECT,
    )
    suspend: bool = Field(
        False,
        description=(
            "True deletes the pods and keeps status and counters; false again starts a new attempt from the "
            "latest checkpoint. Created suspended, the job waits (Kueue unsuspends admitted jobs)."
        ),
    )
    active_deadline_seconds: int | None = Field(
        None, ge=1, description="Fail the job (reason DeadlineExceeded) this long after it started."
    )
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, description="Delete the TrainingJob this long after it succeeded or failed."
    )
    clean_pod_policy: CleanPodPolicy = Field(
        CleanPodPolicy.RUNNING,
        description="Pods a finished job deletes: Running (default; finished pods stay for their logs), All, None.",
    )
    startup_timeout_seconds: int = Field(
        DEFAULT_STARTUP_TIMEOUT_SECONDS, ge=0, le=7 * 24 * 3600,
        description="An attempt whose pods are not all running this long after the first of them was bound to a "
                    "node fails with reason StartupTimeout (then the failure policy decides): bound pods hold "
                    "their nodes' GPUs, and an image that never pulls must not hold them for ever. Time spent "
                    "waiting for a place (queued, unschedulable) does not count. 0: no timeout.",
    )
    image_consistency: ImageConsistency = Field(
        default_factory=ImageConsistency,
        description="Same code on every node: pin the digest, detect mismatches.",
        json_schema_extra=_DEFAULT_EMPTY_OBJECT,
    )
    topology: Topology | None = Field(None, description="Place every node of an attempt in one topology domain.")
    health_check: HealthCheckSpec = Field(default_factory=HealthCheckSpec, json_schema_extra=_DEFAULT_EMPTY_OBJECT,
                                          description="Node health checks before training, and excluding failed nodes.")
    pod_group: PodGroup | None = Field(
        None, description="Deprecated: use spec.scheduling.volcano or spec.scheduling.coscheduling, which also "
                          "create the scheduler's PodGroup. Only labels/annotations for an out-of-tree gang "
                          "scheduler (scheduler-plugins coscheduling, Volcano), which must find its PodGroup "
                          "elsewhere; no native PodGroup is made."
    )
    scheduling: SchedulingSpec = Field(
        default_factory=SchedulingSpec,
        description="Gang scheduling (always on): the partial-gang timeout where PodGroups are not served, or a "
                    "gang scheduler the cluster runs (volcano, coscheduling).",
        json_schema_extra=_DEFAULT_EMPTY_OBJECT,
    )
    hang_detection: HangDetection | None = Field(
        None, description="Restart the gang when no rank progresses (log lines or heartbeats) for a while; report "
                          "stragglers. May be changed while the job runs.")
