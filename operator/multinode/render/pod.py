"""One pod per node: the trainer container plus a DNS preflight init container."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from multinode.api import TrainingJob
from multinode.api.quantity import exact_quantity
from multinode.api.constants import (
    ANNOTATION_MULTUS_NETWORKS,
    LABEL_ATTEMPT,
    LABEL_HOSTNAME,
    LABEL_JOB_NAME,
    LABEL_GPU_PRODUCT,
    PREFLIGHT_CONTAINER,
    SHM_MOUNT_PATH,
    SHM_VOLUME_NAME,
    TRAINER_CONTAINER,
    LABEL_RENDEZVOUS_STORE,
    LABEL_SPARE,
    node_hostname,
)
from multinode.render.attempt_env import env_from_attempt
from multinode.render.in_place import (
    IN_PLACE_ENV_NAMES,
    barrier_args,
    barrier_mounts,
    barrier_volumes,
    in_place_annotations,
    in_place_env,
    rendezvous_env,
    restarts_in_place,
    trainer_attempt_mount,
    trainer_restart_rules,
)
from multinode.render.env import node_env, user_env
from multinode.render.health_check_pod import (
    checked_device_limits,
    checks_rdma,
    checks_shm,
    collective_args,
    collective_limits,
    health_args,
)
from multinode.render.node_exclusion import exclude_nodes
from multinode.render.storage import CACHE_VOLUME, job_cache_dir, node_storage_mounts, storage_volumes
from multinode.render.names import (
    check_node,
    job_identity,
    job_name,
    leader_dns_name,
    node_labels,
    owner_reference,
    pod_name,
    service_name,
)
from multinode.render.security import (
    SHARED_CACHE_DIR_MODE,
    adds_ipc_lock,
    preflight_is_the_trainer,
    preflight_security_context,
    trainer_security_context,
)
from multinode.render.settings import RenderSettings
from multinode.render.tolerations import pod_tolerations

# The preflight checks the node's health, resolves DNS names and creates the job's cache dir; its requests (what
# the scheduler counts) are small, so it asks for no room beside the trainer's.
PREFLIGHT_MEMORY_LIMIT_MIB = 128
PREFLIGHT_RESOURCES = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"memory": f"{PREFLIGHT_MEMORY_LIMIT_MIB}Mi"},
}
# Its CPU limit: the trainer's, within [PREFLIGHT_CPU_FLOOR, PREFLIGHT_CPU_LIMIT]. It runs before the trainer, so
# that CPU is the trainer's own: the pod's limit (the larger of an init container's and the trainer's) stays what
# it was with the floor alone. Held to the floor (its limit until then), its Python start took 2-3 s in a pod, on
# the path of every start and in-place restart.
PREFLIGHT_CPU_FLOOR = "100m"
PREFLIGHT_CPU_LIMIT = "1"


def preflight_cpu_limit(job: TrainingJob) -> str:
    """The trainer's CPU, at least PREFLIGHT_CPU_FLOOR and at most PREFLIGHT_CPU_LIMIT (that, without one)."""
    trainer = job.spec.resources_per_node.cpu
    if trainer is None:
        return PREFLIGHT_CPU_LIMIT
    return min(max(trainer, PREFLIGHT_CPU_FLOOR, key=exact_quantity), PREFLIGHT_CPU_LIMIT, key=exact_quantity)


def _without_empty(mapping: dict[str, Any]) -> dict[str, Any]:
    """Drop None, empty dicts and empty lists, so manifests carry no nulls or noise."""
    return {key: value for key, value in mapping.items() if value not in (None, {}, [])}


def _dump(model: Any) -> dict[str, Any] | None:
    return None if model is None else model.model_dump(by_alias=True, exclude_none=True)


def _dump_all(models: list[Any] | None) -> list[dict[str, Any]]:
    return [model.model_dump(by_alias=True, exclude_none=True) for model in models or []]


def _trainer_resources(job: TrainingJob) -> dict[str, Any]:
    resources = job.spec.resources_per_node
    rdma = job.spec.network.rdma
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    # Extended resources (GPUs, RDMA devices) need only limits: requests default to them.
    if resources.gpus > 0:
        limits[resources.gpu_resource_name] = str(resources.gpus)
    if rdma is not None:
        limits[rdma.resource_name] = str(rdma.count)
    for name, quantity in (("cpu", resources.cpu), ("memory", resources.memory)):
        if quantity is not None:
            limits[name] = quantity
            requests[name] = quantity
    return _without_empty({"limits": limits, "requests": requests})


def trainer_container(job: TrainingJob, env_from: list[dict[str, Any]], env: list[dict[str, Any]],
                      image: str) -> dict[str, Any]:
    """The trainer container, given its env (the attempt's ConfigMap and its own) and image."""
    spec = job.spec
    in_place = restarts_in_place(job)
    mounts = [{"name": SHM_VOLUME_NAME, "mountPath": SHM_MOUNT_PATH}, *node_storage_mounts(job)]
    mounts.extend(_dump_all(spec.pod_template.volume_mounts))
    rules = trainer_restart_rules(job) if in_place else []
    if in_place:
        mounts.append(trainer_attempt_mount())
    return _without_empty(
        {
            "name": TRAINER_CONTAINER,
            "image": image,
            "imagePullPolicy": spec.image_pull_policy,
            "command": spec.command,
            "args": spec.args,
            "workingDir": spec.working_dir,
            # The attempt's shared variables first: `env` (the node's own, then the user's) may refer to
            # them as $(NAME), and the kubelet expands against envFrom and the entries before.
            "envFrom": env_from,
            "env": env,
            "resources": _trainer_resources(job),
            "volumeMounts": mounts,
            "securityContext": trainer_security_context(job),
            # InPlace: the exit codes no failure policy rule names restart the whole pod in place.
            "restartPolicy": "Never" if rules else None,
            "restartPolicyRules": rules,
        }
    )


def preflight_container(job: TrainingJob, index: int | None, env_from: list[dict[str, Any]],
                        settings: RenderSettings) -> dict[str, Any]:
    """The preflight init container of node `index` (None: of a hot spare, which has no index yet and waits
    for one, preflight/program.py)."""
    args = ["--timeout", str(settings.preflight_timeout_seconds), *health_args(job)]
    args += collective_args(job, index) if index is not None else ["--spare"]
    cache_dir = job_cache_dir(job)
    mounts: list[dict[str, Any]] = []
    env: list[dict[str, Any]] = []
    if restarts_in_place(job):  # restarted in place, it holds the trainer until the operator's new attempt
        args += barrier_args(job)
        mounts += barrier_mounts()
        env = rendezvous_env()  # the attempt's port and id, for the collective test
    if checks_shm(job):  # the health check measures the trainer's /dev/shm
        mounts.append({"name": SHM_VOLUME_NAME, "mountPath": SHM_MOUNT_PATH})
    if cache_dir is not None:
        # The job's cache dir exists before the trainer starts, so scripts can write into it at once.
        args += ["--make-dir", cache_dir]
        if not preflight_is_the_trainer(job):
            args += ["--make-dir-mode", SHARED_CACHE_DIR_MODE]
        mounts += [m for m in node_storage_mounts(job) if m["name"] == CACHE_VOLUME]
    resources = {kind: dict(values) for kind, values in PREFLIGHT_RESOURCES.items()}
    resources["limits"]["cpu"] = preflight_cpu_limit(job)
    # The trainer's GPUs and RDMA devices, so the health check sees what the trainer will.
    resources["limits"].update(checked_device_limits(job))
    resources["limits"].update(collective_limits(job, PREFLIGHT_MEMORY_LIMIT_MIB))
    return _without_empty({
        "name": PREFLIGHT_CONTAINER,
        "image": settings.operator_image,
        "command": ["multinode", "preflight"],
        "args": args,
        # The attempt's shared variables (it reads the peers' names from them), never the user's env: that
        # may reference secrets it has no business reading.
        "envFrom": env_from,
        "env": env,
        "resources": resources,
        "volumeMounts": mounts,
        # Same memlock rights as the trainer, or the memlock check would judge a different container.
        "securityContext": preflight_security_context(job, ipc_lock=checks_rdma(job) and adds_ipc_lock(job)),
    })


def _shm_volume(job: TrainingJob) -> dict[str, Any]:
    # Always a memory-backed /dev/shm: the container runtime's 64 MB default makes NCCL
    # slow or hang without a clear error. Without shmSize it is bounded by the pod's
    # memory limit only.
    empty_dir = _without_empty({"medium": "Memory", "sizeLimit": job.spec.shm_size})
    return {"name": SHM_VOLUME_NAME, "emptyDir": empty_dir}


def _annotations(job: TrainingJob) -> dict[str, str]:
    annotations = dict(job.spec.pod_template.annotations or {})
    networks = job.spec.network.multus_networks
    if networks:
        annotations[ANNOTATION_MULTUS_NETWORKS] = ",".join(networks)
    return annotations


@dataclass(frozen=True)
class PodKeys:
    """What the integrations (integrations/) add to a node pod: labels and annotations (the key that joins a
    pod to a gang scheduler's group), the schedulerName when the podTemplate names none, and the native
    PodGroup the pod joins (core/v1 PodSchedulingGroup)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None
    scheduling_group: str | None = None

    def then(self, other: PodKeys) -> PodKeys:
        """Both: `other`'s labels and annotations win where both set one; the first scheduler and group named."""
        return PodKeys({**self.labels, **other.labels}, {**self.annotations, **other.annotations},
                       self.scheduler_name or other.scheduler_name, self.scheduling_group or other.scheduling_group)


def off_spares(job_name: str) -> dict[str, Any]:
    """The anti-affinity term that keeps a node pod off the machines of the job's hot spares (spec.spareNodes):
    a spare's machine must be free for the rank it takes."""
    return {"labelSelector": {"matchLabels": {LABEL_JOB_NAME: job_name},
                              "matchExpressions": [{"key": LABEL_SPARE, "operator": "Exists"}]},
            "topologyKey": LABEL_HOSTNAME}


def off_rendezvous_store(job_name: str) -> dict[str, Any]:
    """The preferred anti-affinity term that keeps an elastic job's node pods off its rendezvous store's machine
    (render/rendezvous_store.py, which prefers the same): losing a training node must not take the store."""
    return {"weight": 100, "podAffinityTerm": {
        "labelSelector": {"matchLabels": {LABEL_JOB_NAME: job_name},
                          "matchExpressions": [{"key": LABEL_RENDEZVOUS_STORE, "operator": "Exists"}]},
        "topologyKey": LABEL_HOSTNAME}}


def one_pod_per_node(job_name: str, attempt: int, also: Sequence[int] = ()) -> dict[str, Any]:
    """The required pod anti-affinity term that keeps an attempt's node pods on different machines, whatever
    their resources ask (a 1-GPU node pod would otherwise share an 8-GPU machine). Only the same attempt's
    pods count: the previous attempt's, still terminating after a restart, must not block the new gang.
    `also`: the attempts the rest of the gang's pods were made for (a pod replaced into a gang restarted in
    place, reconcile/in_place.py)."""
    if not also:
        return {"labelSelector": {"matchLabels": {LABEL_JOB_NAME: job_name, LABEL_ATTEMPT: str(attempt)}},
                "topologyKey": LABEL_HOSTNAME}
    attempts = [str(a) for a in sorted({attempt, *also})]
    return {"labelSelector": {"matchLabels": {LABEL_JOB_NAME: job_name},
                              "matchExpressions": [{"key": LABEL_ATTEMPT, "operator": "In", "values": attempts}]},
            "topologyKey": LABEL_HOSTNAME}


def _affinity(job: TrainingJob, attempt: int, excluded_nodes: Sequence[str], also: Sequence[int]) -> dict[str, Any]:
    """The user's affinity, plus the nodes the attempt must stay off and one pod per node."""
    user = job.spec.pod_template.affinity
    merged = exclude_nodes(user.model_dump(by_alias=True, exclude_none=True) if user else None, excluded_nodes) or {}
    anti = merged.setdefault("podAntiAffinity", {})
    anti["requiredDuringSchedulingIgnoredDuringExecution"] = [
        *(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []),
        one_pod_per_node(job_name(job), attempt, also), *([off_spares(job_name(job))] if job.spec.spare_nodes else [])]
    if job.spec.elastic is not None:  # away from the rendezvous store's machine, when there is room
        anti["preferredDuringSchedulingIgnoredDuringExecution"] = [
            *(anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []), off_rendezvous_store(job_name(job))]
    return merged


def _node_env(job: TrainingJob, index: int, resume_from: str, in_place: bool) -> list[dict[str, Any]]:
    """The node's own variables; InPlace: those an in-place attempt changes read from the pod's annotations."""
    env = node_env(job, index, resume_from=resume_from)
    if not in_place:
        return env
    return [var for var in env if var["name"] not in IN_PLACE_ENV_NAMES] + in_place_env(job)


def _node_selector(job: TrainingJob) -> dict[str, str]:
    selector = dict(job.spec.pod_template.node_selector or {})
    if job.spec.accelerator is not None:
        selector[LABEL_GPU_PRODUCT] = job.spec.accelerator
    return selector


def render_node_pod(
    job: TrainingJob,
    index: int,
    attempt: int,
    settings: RenderSettings | None = None,
    *,
    resume_from: str = "",
    image: str | None = None,
    node_selector: dict[str, str] | None = None,
    excluded_nodes: Sequence[str] = (),
    keys: PodKeys = PodKeys(),
    restarts: int = 0,
    gang: Sequence[int] = (),
    leader: str | None = None,
) -> dict[str, Any]:
    """The pod of node `index` in gang attempt `attempt`. It reads the attempt's shared env from the
    attempt's ConfigMap (render_attempt_env), which must exist before the pod starts.

    `resume_from` is the checkpoint path the attempt starts from ("" for none); `image` replaces
    spec.image (the pinned digest); `node_selector` is added to the job's (the chosen topology domain);
    `excluded_nodes` are nodes the pod must not run on (status.excludedNodes).
    `keys` is what the integrations add (reconcile/integration.py pod_keys): the attempt's gang group.
    `restarts` is the job's counted restarts so far (an InPlace pod's annotation; the ConfigMap has it too).
    `gang`: for a pod replaced into a gang restarted in place (reconcile/in_place.py), the attempts the other
    pods were made for, the first being the one whose ConfigMap the gang shares. `leader`: rank 0's DNS name,
    when a hot spare holds it (an InPlace pod's annotation; node 0's by default).
    """
    check_node(job, index, attempt)
    settings = settings or RenderSettings()
    in_place = restarts_in_place(job)
    identity = job_identity(job)
    spec = job.spec
    template = spec.pod_template
    host_network = spec.network.host_network
    env_from = env_from_attempt(job, gang[0] if gang else attempt)

    # User labels first: multinode's labels drive the Service selector and the
    # controller's bookkeeping, so they must win.
    labels = {**(template.labels or {}), **keys.labels, **node_labels(identity.name, index, attempt)}
    metadata = _without_empty(
        {
            "name": pod_name(identity.name, index, attempt),
            "namespace": identity.namespace,
            "labels": labels,
            "annotations": {**_annotations(job), **keys.annotations,
                            **(in_place_annotations(job, attempt, resume_from, restarts, 0,
                                                    leader or leader_dns_name(job)) if in_place else {})},
            "ownerReferences": [owner_reference(job)],
        }
    )
    pod_spec = _without_empty(
        {
            "hostname": node_hostname(identity.name, index),
            "subdomain": service_name(identity.name),
            # The controller restarts the whole gang; a pod restarting alone cannot
            # rejoin a torch rendezvous that has moved on.
            "restartPolicy": "Never",
            "initContainers": [preflight_container(job, index, env_from, settings)],
            "containers": [trainer_container(job, env_from, [*_node_env(job, index, resume_from, in_place),
                                                             *user_env(job)], image or spec.image)],
            "volumes": [_shm_volume(job), *storage_volumes(job), *(barrier_volumes() if in_place else []),
                        *_dump_all(template.volumes)],
            "nodeSelector": {**_node_selector(job), **(node_selector or {})},
            "tolerations": pod_tolerations(job),
            "affinity": _affinity(job, attempt, excluded_nodes, gang),
            "priorityClassName": template.priority_class_name,
            "schedulerName": template.scheduler_name or keys.scheduler_name,
            "serviceAccountName": template.service_account_name,
            # The trainers get the API token only when the job asks: most never call the API.
            "automountServiceAccountToken": template.automount_service_account_token,
            "securityContext": _dump(template.security_context),
            "runtimeClassName": template.runtime_class_name,
            "terminationGracePeriodSeconds": template.termination_grace_period_seconds,
            "imagePullSecrets": _dump_all(template.image_pull_secrets),
            "hostNetwork": True if host_network else None,
            # With hostNetwork the default policy would use the node's resolver and
            # miss the cluster DNS names the rendezvous depends on.
            "dnsPolicy": "ClusterFirstWithHostNet" if host_network else None,
            # core/v1 PodSchedulingGroup (1.36): the scheduler holds the pod until the group's minCount fit.
            "schedulingGroup": {"podGroupName": keys.scheduling_group} if keys.scheduling_group else None,
        }
    )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
