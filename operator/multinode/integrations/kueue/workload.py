"""The Kueue Workload of a queued job (label kueue.x-k8s.io/queue-name): what Kueue's jobframework would make
for a kind it knows. One per job, owned by it (controller reference), with one podSet `node` of numNodes pods
whose template is the node pod as the operator renders it (requests and limits, GPUs and RDMA devices, the
preflight init container, node selector, tolerations, affinity, priority class): Kueue counts the quota from it.

Field names checked against sigs.k8s.io/kueue v0.17.0 apis/kueue/v1beta2 (WorkloadSpec, PodSet,
PriorityClassRef). Kueue's defaulting webhook for Workloads only drops podSets[].minCount without the
PartialAdmission gate, so a Workload with no minCount is what it would store.

Only the parts of the pod that Kueue reads are copied into the podSet (containers' names, images and
resources, the node pod's scheduling fields): the rest (env, volumes, the native gang's schedulingGroup) is
the operator's business, and a field newer than Kueue's copy of the PodSpec schema would make the create fail.
"""

from __future__ import annotations

import hashlib
from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import (
    KUEUE_API_GROUP,
    KUEUE_API_VERSION,
    KUEUE_POD_SET,
    KUEUE_WORKLOAD_KIND,
    LABEL_KUEUE_QUEUE_NAME,
)
from multinode.render.names import common_labels, job_identity, owner_reference
from multinode.render.pod import render_node_pod
from multinode.render.settings import RenderSettings

# The pod spec fields a podSet's template keeps: what Kueue counts (resources, overhead) or matches against
# flavors and topology (node selector, affinity, tolerations), and the priority class.
_POD_FIELDS = ("nodeSelector", "affinity", "tolerations", "priorityClassName", "overhead", "restartPolicy",
               "runtimeClassName", "schedulerName")
_CONTAINER_FIELDS = ("name", "image", "resources", "restartPolicy")


def workload_name(job_name: str, uid: str) -> str:
    """`trainingjob-<job>-<5 hex of the uid>`, as Kueue names a job's Workload (kind, name, a hash): one per
    job, and a job recreated under the same name gets another."""
    digest = hashlib.sha256(uid.encode()).hexdigest()[:5]
    return f"trainingjob-{job_name}-{digest}"


def _container(c: dict[str, Any]) -> dict[str, Any]:
    return {k: c[k] for k in _CONTAINER_FIELDS if k in c}


def pod_set_template(job: TrainingJob, settings: RenderSettings | None = None) -> dict[str, Any]:
    """The node pod's template as Kueue reads it: rendered by render_node_pod (node 0, attempt 0; every node's
    pod asks for the same), then cut to the fields Kueue uses."""
    pod = render_node_pod(job, 0, 0, settings)
    spec = pod["spec"]
    out: dict[str, Any] = {"containers": [_container(c) for c in spec["containers"]]}
    if spec.get("initContainers"):
        out["initContainers"] = [_container(c) for c in spec["initContainers"]]
    out.update({k: spec[k] for k in _POD_FIELDS if spec.get(k) is not None})
    return {"metadata": {"labels": common_labels(job_identity(job).name)}, "spec": out}


def render_workload(job: TrainingJob, settings: RenderSettings | None = None, *,
                    priority: int | None = None) -> dict[str, Any]:
    """The job's Workload: queueName from the label, one podSet of numNodes node pods. `priority` is the
    value of podTemplate.priorityClassName's PriorityClass (Kueue orders its queue by spec.priority, and
    requires it with a priorityClassRef); without a priority class neither is set."""
    identity = job_identity(job)
    uid = job.metadata.uid or ""
    queue = (job.metadata.labels or {}).get(LABEL_KUEUE_QUEUE_NAME, "")
    spec: dict[str, Any] = {
        "queueName": queue,
        "active": True,
        "podSets": [{"name": KUEUE_POD_SET, "count": job.spec.num_nodes,
                     "template": pod_set_template(job, settings)}],
    }
    priority_class = job.spec.pod_template.priority_class_name
    if priority_class and priority is not None:
        spec["priorityClassRef"] = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": priority_class}
        spec["priority"] = priority
    return {
        "apiVersion": f"{KUEUE_API_GROUP}/{KUEUE_API_VERSION}",
        "kind": KUEUE_WORKLOAD_KIND,
        "metadata": {
            "name": workload_name(identity.name, uid),
            "namespace": identity.namespace,
            "labels": {**common_labels(identity.name), LABEL_KUEUE_QUEUE_NAME: queue},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }
