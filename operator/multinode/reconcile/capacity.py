"""Why a job's pods cannot be placed, in words a user can act on, instead of the scheduler's bare Unschedulable.

Two first-day failures have a cause the scheduler's message hides: no node of the cluster offers the GPU (or
RDMA) resource the job asks for (no device plugin: "0/8 nodes are available: 8 Insufficient nvidia.com/gpu"
reads like a busy cluster), and a job with more nodes than the cluster has machines for it (one pod per node,
render/pod.py). Both are read from the nodes' capacity, never from what other pods use: a busy cluster stays
Unschedulable with the scheduler's own words.
"""

from __future__ import annotations

from collections.abc import Sequence

from multinode.api import Phase, TrainingJob
from multinode.api.conditions import Reason
from multinode.reconcile.outcome import Verdict
from multinode.reconcile.placement import ObservedNode, fits

PREREQUISITES_DOC = "docs/gpu-prerequisites.md"


def _quantity(node: ObservedNode, resource: str) -> int:
    try:
        return int(node.allocatable.get(resource, "0"))
    except ValueError:
        return 0


def _asked(job: TrainingJob) -> list[tuple[str, str]]:
    """The extended resources each pod asks for, with the field that names them."""
    asked = []
    resources = job.spec.resources_per_node
    if resources.gpus > 0:
        asked.append((resources.gpu_resource_name, "resourcesPerNode.gpuResourceName"))
    if job.spec.network.rdma is not None:
        asked.append((job.spec.network.rdma.resource_name, "network.rdma.resourceName"))
    return asked


def explain_unschedulable(job: TrainingJob, verdict: Verdict, nodes: Sequence[ObservedNode]) -> Verdict:
    """`verdict` (judge's), said more usefully when its pods are Unschedulable for a cause the nodes show."""
    if verdict.reason != Reason.UNSCHEDULABLE or not nodes:
        return verdict
    for resource, field in _asked(job):
        if not any(_quantity(n, resource) > 0 for n in nodes):
            return Verdict(Phase.PENDING, Reason.NO_NODE_OFFERS_RESOURCE,
                           f"no node offers {resource} (spec.{field}): install its device plugin, or name the "
                           f"resource this cluster's nodes advertise ({PREREQUISITES_DOC}); {verdict.message}")
    eligible = sum(1 for n in nodes if fits(job, n))
    need = job.spec.num_nodes
    if eligible < need:
        return Verdict(Phase.PENDING, Reason.NOT_ENOUGH_NODES,
                       f"{need} nodes needed (one pod per node), {eligible} Ready node(s) match the job's node "
                       f"selector and have {job.spec.resources_per_node.gpus} GPU(s); it waits for more: "
                       f"{verdict.message}")
    return verdict
