"""The checkpoint mirror of a job: its pod, and an identity that may touch nothing but TrainingJob status.

The mirror runs as its own small CPU pod (not a sidecar): it must outlive the loss of any training
node, keep running while the gang restarts, and do the final sync after every node has exited.
"""

from __future__ import annotations

from typing import Any

from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, TrainingJob, world_size
from multinode.api.constants import (
    LABEL_HOSTNAME,
    LABEL_APP_NAME,
    LABEL_MANAGED_BY,
    LABEL_MIRROR_OF,
    MANAGED_BY_VALUE,
    MIRROR_CONTAINER,
    MIRROR_HEALTH_PATH,
    MIRROR_METRICS_PORT,
    MIRROR_STUCK_AFTER_SECONDS,
)
from multinode.render.names import job_identity, owner_reference
from multinode.render.settings import RenderSettings
from multinode.render.security import mirror_container_security_context, mirror_pod_security_context
from multinode.render.storage import job_cache_dir, job_mirror_dir, mirror_storage_mounts, mirror_storage_volumes
from multinode.render.tolerations import mirror_tolerations

MIRROR_RESOURCES = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}


def mirror_name(job_name: str) -> str:
    return f"{job_name}-mirror"


def mirror_labels(job_name: str) -> dict[str, str]:
    return {LABEL_MIRROR_OF: job_name, LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_APP_NAME: "multinode-mirror"}


def _metadata(job: TrainingJob) -> dict[str, Any]:
    identity = job_identity(job)
    return {"name": mirror_name(identity.name), "namespace": identity.namespace,
            "labels": mirror_labels(identity.name), "ownerReferences": [owner_reference(job)]}


def render_mirror_service_account(job: TrainingJob) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(job)}


# What a mirror may do: read and patch TrainingJob status (mirror/reporter.py). The chart ships these rules as
# a ClusterRole (templates/mirror-rbac.yaml; a test compares them), bound per job by a RoleBinding in the
# job's namespace: the operator holds `bind` on that one ClusterRole and creates no Roles, so it cannot hand
# out any other right. That a mirror writes only its own job's status is the chart's admission policy's to
# enforce, in the same template.
MIRROR_RULES = [{"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "patch"]}]


def render_mirror_role_binding(job: TrainingJob, settings: RenderSettings | None = None) -> dict[str, Any]:
    """Binds the mirror ClusterRole to this job's mirror ServiceAccount, in the job's namespace only."""
    settings = settings or RenderSettings()
    name = mirror_name(job_identity(job).name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(job),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": settings.mirror_cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": job.metadata.namespace}],
    }


def render_mirror_pod(job: TrainingJob, settings: RenderSettings | None = None) -> dict[str, Any]:
    settings = settings or RenderSettings()
    ckpt = job.spec.checkpointing
    if ckpt is None or job.spec.cache is None:
        raise ValueError("a mirror needs spec.cache and spec.checkpointing")
    identity = job_identity(job)
    template = job.spec.pod_template
    args = [
        "--source", job_cache_dir(job), "--dest", job_mirror_dir(job),
        "--job", identity.name, "--namespace", identity.namespace,
        "--completion", ckpt.completion.value, "--keep", str(ckpt.keep),
        "--interval", str(ckpt.interval_seconds), "--settle", str(ckpt.settle_seconds),
        "--metrics-port", str(MIRROR_METRICS_PORT), "--world-size", str(world_size(job.spec)),
        "--stuck-after", str(MIRROR_STUCK_AFTER_SECONDS),
    ]
    container = {
        "name": MIRROR_CONTAINER,
        "image": settings.operator_image,
        "command": ["multinode", "mirror"],
        "args": args,
        "ports": [{"name": "metrics", "containerPort": MIRROR_METRICS_PORT}],
        "resources": {kind: dict(values) for kind, values in MIRROR_RESOURCES.items()},
        # Restarted after three failed looks: about 1.5 min after /healthz turns 503 (mirror/liveness.py).
        "livenessProbe": {"httpGet": {"path": MIRROR_HEALTH_PATH, "port": "metrics"}, "periodSeconds": 30,
                          "timeoutSeconds": 5, "failureThreshold": 3},
        "volumeMounts": mirror_storage_mounts(job),
        "securityContext": mirror_container_security_context(),
    }
    # Prefer a node that runs none of the job's training pods: losing one node should not take
    # both a rank and the only copy process with it.
    anti_affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "podAffinityTerm": {"topologyKey": LABEL_HOSTNAME,
                            "labelSelector": {"matchLabels": {LABEL_JOB_NAME: identity.name}}},
    }]}}
    spec: dict[str, Any] = {
        "serviceAccountName": mirror_name(identity.name),
        # Its own identity's token, the one credential it needs (to patch its job's status).
        "automountServiceAccountToken": True,
        "securityContext": mirror_pod_security_context(),
        # A crashed mirror restarts in place; after its final sync it exits 0 and stays Succeeded.
        "restartPolicy": "OnFailure",
        "containers": [container],
        "volumes": mirror_storage_volumes(job),
        "affinity": anti_affinity,
    }
    # The mirror needs the job's volumes, and runs in the job's pool: the job's node selector and
    # tolerations (a GPU pool's taint, say) apply to it too; but it leaves a lost node after the job's
    # nodeLossTolerationSeconds, whatever the trainers tolerate (the operator replaces it then).
    if template.node_selector:
        spec["nodeSelector"] = dict(template.node_selector)
    spec["tolerations"] = mirror_tolerations(job)
    if template.priority_class_name:
        spec["priorityClassName"] = template.priority_class_name
    if template.image_pull_secrets:
        spec["imagePullSecrets"] = [s.model_dump(by_alias=True) for s in template.image_pull_secrets]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _metadata(job), "spec": spec}


def render_mirror_objects(job: TrainingJob, settings: RenderSettings | None = None) -> list[dict[str, Any]]:
    """In creation order: the identity first, so the pod never starts without its permissions."""
    return [render_mirror_service_account(job), render_mirror_role_binding(job, settings),
            render_mirror_pod(job, settings)]
