"""What the controller observed of one job, as the planner reads it (plan.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from multinode.reconcile.checkpointing import Resumer
from multinode.reconcile.integration import Seen
from multinode.reconcile.lease_loss import NodeLease
from multinode.reconcile.node_loss import NodeDown
from multinode.reconcile.observe import ObservedMirror, ObservedPod
from multinode.reconcile.placement import ObservedNode
from multinode.reconcile.progress import JobProgress


@dataclass(frozen=True)
class Observed:
    """What the controller's indices hold for one job."""

    pods: tuple[ObservedPod, ...] = ()
    # Hot spares (spec.spareNodes) that have not taken a rank; one that has is among `pods`.
    spares: tuple[ObservedPod, ...] = ()
    # An elastic job's rendezvous store pods (spec.elastic), of any attempt: none of them is among `pods`.
    rendezvous_stores: tuple[ObservedPod, ...] = ()
    service_exists: bool = False
    mirror: ObservedMirror | None = None
    # Latest mirrored checkpoint of the job named in spec.checkpointing.resumeFrom.trainingJob.
    resume_source_latest: str | None = None
    # The jobs of the namespace whose spec.checkpointing.resumeFrom.trainingJob names this one.
    resumers: tuple[Resumer, ...] = ()
    # Nodes, only when spec.topology asks for one domain, stragglers.action Exclude must know the job fits, or
    # a pod is Unschedulable and capacity.py tells why.
    nodes: tuple[ObservedNode, ...] = ()
    # Nodes that host the job's pods (its mirror's too) and are not Ready or are gone, by name (node_loss.py).
    down_nodes: Mapping[str, NodeDown] = field(default_factory=dict)
    # The Leases of the nodes hosting the job's pods, by node name: only for a job with hot spares waiting
    # (lease_loss.py).
    node_leases: Mapping[str, NodeLease] = field(default_factory=dict)
    # Nodes that host the job's pods and are cordoned (spec.unschedulable: a drain, node repair), by name
    # (disruption.py).
    cordoned_nodes: frozenset[str] = frozenset()
    # What the controller's log prober last read of the current attempt's ranks (spec.hangDetection only).
    progress: JobProgress | None = None
    # DisruptionTarget reasons of deleted pods, by name, from their last watch event.
    gone_disruptions: Mapping[str, str] = field(default_factory=dict)
    # Every integration (integrations/registry.py, in its order), whether the apiserver serves its API and
    # what it observed of this job (reconcile/integration.py). None given: the job is planned with none.
    integrations: tuple[Seen, ...] = ()


