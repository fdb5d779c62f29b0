"""Where an attempt's pods go and what they run: one topology domain, one image digest."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from multinode.api import TrainingJob
from multinode.api.constants import LABEL_GPU_PRODUCT
from multinode.reconcile.observe import ObservedPod

_RUNTIME_PREFIXES = ("docker-pullable://", "docker://", "containerd://")


@dataclass(frozen=True)
class ObservedNode:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True
    schedulable: bool = True
    allocatable: Mapping[str, str] = field(default_factory=dict)


def _fits(job: TrainingJob, node: ObservedNode) -> bool:
    selector = dict(job.spec.pod_template.node_selector or {})
    if job.spec.accelerator:
        selector[LABEL_GPU_PRODUCT] = job.spec.accelerator
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return False
    gpus = job.spec.resources_per_node.gpus
    if gpus:
        try:
            if int(node.allocatable.get(job.spec.resources_per_node.gpu_resource_name, "0")) < gpus:
                return False
        except ValueError:
            return False
    return node.ready and node.schedulable


def choose_domain(job: TrainingJob, nodes: Iterable[ObservedNode]) -> tuple[str | None, str]:
    """The domain (label value) with the most eligible nodes, if it has at least numNodes; and why.

    Eligible: Ready, schedulable, matching the job's node selector and with enough GPUs. Only node
    capacity is counted, not what other pods use, so a full domain shows up as Unschedulable pods.
    """
    assert job.spec.topology is not None
    key = job.spec.topology.same_domain_label
    counts = Counter(n.labels[key] for n in nodes if key in n.labels and _fits(job, n))
    need = job.spec.num_nodes
    if not counts:
        return None, f"no eligible node has the label {key}"
    # Most nodes first; the name breaks ties so the choice is stable.
    domain, have = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if have < need:
        return None, f"no {key} domain has {need} eligible nodes (largest: {domain} with {have})"
    return domain, f"{key}={domain} ({have} eligible nodes)"


def digest_reference(image_id: str | None) -> str | None:
    """image@sha256:... from a container status imageID, or None when it names no repository digest."""
    if not image_id:
        return None
    for prefix in _RUNTIME_PREFIXES:
        if image_id.startswith(prefix):
            image_id = image_id[len(prefix):]
    return image_id if "@sha256:" in image_id and not image_id.startswith("sha256:") else None


def running_digests(pods: Iterable[ObservedPod]) -> dict[str, list[str]]:
    """Digest → pod names, for the pods of an attempt that report one."""
    by_digest: dict[str, list[str]] = {}
    for p in pods:
        ref = digest_reference(p.image_id)
        if ref is not None:
            by_digest.setdefault(ref.split("@", 1)[1], []).append(p.name)
    return by_digest


def observe_node(node: Mapping) -> ObservedNode:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return ObservedNode(name=meta.get("name", ""), labels=dict(meta.get("labels") or {}), ready=ready,
                        schedulable=not spec.get("unschedulable", False),
                        allocatable=dict(status.get("allocatable") or {}))
