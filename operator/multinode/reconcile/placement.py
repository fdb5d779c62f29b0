"""Topology: an attempt's pods go to one domain (spec.topology.sameDomainLabel) with room for them all."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.constants import LABEL_GPU_PRODUCT
from multinode.api.progress import StragglerAction
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.decision import Decision
from multinode.reconcile.outcome import Verdict


@dataclass(frozen=True)
class ObservedNode:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True
    schedulable: bool = True
    allocatable: Mapping[str, str] = field(default_factory=dict)
    # The Ready condition as written: "True", "False" (kubelet says so) or "Unknown" (no heartbeat), and
    # its lastTransitionTime; node_loss.py reads them.
    ready_status: str = "True"
    ready_since: str | None = None
    # status.declaredFeatures: what the node's kubelet serves (restart_strategy.py reads it).
    declared_features: frozenset[str] = frozenset()


def fits(job: TrainingJob, node: ObservedNode) -> bool:
    """Whether `node` could host one of the job's pods: Ready, schedulable, matching its node selector, with
    enough GPUs (capacity, not what other pods use)."""
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
    counts = Counter(n.labels[key] for n in nodes if key in n.labels and fits(job, n))
    need = job.spec.num_nodes
    if not counts:
        return None, f"no eligible node has the label {key}"
    # Most nodes first; the name breaks ties so the choice is stable.
    domain, have = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if have < need:
        return None, f"no {key} domain has {need} eligible nodes (largest: {domain} with {have})"
    return domain, f"{key}={domain} ({have} eligible nodes)"


def needs_nodes(job: TrainingJob, pods: Iterable[ObservedPod] = ()) -> bool:
    """Whether planning the job reads the cluster's nodes (Observed.nodes): to choose its restart strategy
    (once, when its spec leaves it unset: `job` is the job as it runs, restart_strategy.with_restart_strategy),
    to choose a topology domain, to tell whether the job still fits without a straggler's node, or to say why a
    pod is Unschedulable (capacity.py). Reading them costs O(nodes), so only then."""
    detection = job.spec.hang_detection
    return job.spec.failure_policy.restart_strategy is None or job.spec.topology is not None or (
        detection is not None and detection.stragglers.action == StragglerAction.EXCLUDE) or any(
        p.unschedulable for p in pods)


def slots(job: TrainingJob, node: ObservedNode) -> int:
    """How many of the job's pods `node` could host: one if it is eligible (one pod per node: the pods' required
    anti-affinity, render/pod.py), else none."""
    return 1 if fits(job, node) else 0


def room_for(job: TrainingJob, nodes: Iterable[ObservedNode], without: set[str]) -> int:
    """How many of the job's pods the nodes not in `without` can host by capacity (not counting what other
    pods use); with spec.topology, in the roomiest domain, as an attempt's pods all go to one."""
    key = job.spec.topology.same_domain_label if job.spec.topology else None
    room: Counter[str] = Counter()
    for n in nodes:
        if n.name in without or (key is not None and key not in n.labels):
            continue
        room[n.labels[key] if key is not None else ""] += slots(job, n)
    return max(room.values(), default=0)


def attempt_node_selector(job: TrainingJob, status: TrainingJobStatus,
                          nodes: Iterable[ObservedNode]) -> tuple[dict[str, str] | None, Decision]:
    """The node selector of the attempt's pods: the attempt's domain, chosen once (the decision keeps it in
    status.topologyDomain); or no selector and a Pending verdict when no domain fits the gang."""
    if job.spec.topology is None:
        return None, Decision()
    if status.topology_domain is not None:
        return {job.spec.topology.same_domain_label: status.topology_domain}, Decision()
    # Excluded nodes (exclusion.py) cannot host the attempt: they do not count toward a domain.
    excluded = {e.node for e in status.excluded_nodes}
    domain, why = choose_domain(job, (n for n in nodes if n.name not in excluded))
    if domain is None:
        return None, Decision(verdict=Verdict(Phase.PENDING, Reason.NO_TOPOLOGY_DOMAIN, why))
    return {job.spec.topology.same_domain_label: domain}, Decision(status={"topology_domain": domain})


def observe_node(node: Mapping[str, Any]) -> ObservedNode:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    condition: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    # No Ready condition yet: a node being registered, which no pod can be running on.
    ready_status = condition.get("status") or "Unknown"
    return ObservedNode(name=meta.get("name", ""), labels=dict(meta.get("labels") or {}),
                        ready=ready_status == "True", schedulable=not spec.get("unschedulable", False),
                        allocatable=dict(status.get("allocatable") or {}),
                        ready_status=ready_status, ready_since=condition.get("lastTransitionTime"),
                        declared_features=frozenset(f for f in status.get("declaredFeatures") or []
                                                    if isinstance(f, str)))
