"""A node whose kubelet stops renewing its Lease is lost before its Ready condition says so: while a hot spare
(spec.spareNodes) waits to take its rank, and while its peers' trainers restarted in place without it.

On stock settings a kubelet renews its Lease every 10 s (a quarter of its 40 s leaseDurationSeconds), and the
node lifecycle controller turns the node NotReady (Ready Unknown) only once the lease is 40 s old; the pods'
node-loss toleration comes on top (node_loss.py). A current pod whose node's lease is older than half its
duration (two renewals missed) is lost now when something already says so: a warm spare waits (a false alarm,
a kubelet that only fell behind, costs a spare swap, which is what a spare is for), or the other ranks'
trainers failed and restarted in place while that node said nothing (their collectives lost it). The lost
pod's old attempt is fenced off as any other: the gang's next attempt has its own rendezvous port and id
(render/in_place.py). The lost pod is force-deleted with that attempt, as on a NotReady node (node_loss.py): its
node reads Ready for another 20 s, and a graceful deletion would leave the job Restarting (WaitingForOldPods)
until then, while it trains. For as long, the node is kept out of the job's new pods (status.excludedNodes):
freed of its pod, it would take the lost rank's new pod or the spare pool's refill.

Which of the two came first matters too. A node that dies takes its rank with it, and the other ranks'
collectives fail at once: their trainers exit and restart in place before the dead node's lease is stale.
Declared then, their new attempt would wait for the dead node: torchrun's agent starts its rendezvous (at the
dead rank 0's name, or with rank 0 waiting for the dead rank), a wait in no process the operator's next
attempt can stop, and the node's replacement, declared later as the attempt after, never meets them: the
in-place restart is abandoned after 120 s and the gang recreated (docs/benchmarks.md measured about 4
minutes). So a trainer restarted in place is held at its preflight barrier until every pod that did not
restart has its node renew its lease after that restart (≤ 10 s on stock settings, and nothing when the peers
restart too, as gloo's do at once: the cost of telling a crash from a dead node); a lease that goes stale
instead makes it the node's loss, and one attempt follows, uncounted, the lost rank on a spare or a new pod.

Leases are not watched (every kubelet writes one every 10 s): the controller reads them from the apiserver's
watch cache, shared by every job (controller/node_leases.py), only for a job with spares or a trainer
restarted in place, and such a job comes back every LEASE_CHECK_SECONDS (held: HOLD_CHECK_SECONDS) to look
again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from multinode.api import Phase, TrainingJob
from multinode.api.conditions import Reason
from multinode.api.health_check import ExcludedNode
from multinode.api.timestamps import parse_time
from multinode.reconcile.decision import Decision
from multinode.reconcile.exclusion import exclude_node
from multinode.reconcile.failures import Failure
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.outcome import Verdict
from multinode.render.in_place import restarts_in_place

# How often a job with spares looks at its nodes' leases again (a kubelet renews every 10 s).
LEASE_CHECK_SECONDS = 5.0
# Kubernetes' default leaseDurationSeconds, for a Lease that does not say.
DEFAULT_LEASE_DURATION_SECONDS = 40


@dataclass(frozen=True)
class NodeLease:
    """What the check needs of a node's Lease."""

    renewed: str | None  # spec.renewTime (RFC3339, microseconds)
    duration_seconds: int = DEFAULT_LEASE_DURATION_SECONDS


def observe_lease(lease: Mapping[str, Any]) -> tuple[str, NodeLease]:
    """(node name, its lease) from a kube-node-lease Lease."""
    spec = lease.get("spec") or {}
    renewed = spec.get("renewTime")  # a MicroTime: whole seconds are enough here, and what parse_time reads
    if renewed and "." in renewed:
        renewed = renewed.split(".", 1)[0] + "Z"
    return (lease.get("metadata") or {}).get("name", ""), NodeLease(
        renewed, int(spec.get("leaseDurationSeconds") or DEFAULT_LEASE_DURATION_SECONDS))


def stale_for(lease: NodeLease, now: datetime) -> float | None:
    """Seconds since the lease was renewed, once that is more than half its duration (None: fresh, or never
    renewed: a node still registering)."""
    if not lease.renewed:
        return None
    age = (now - parse_time(lease.renewed, now)).total_seconds()
    return age if age > lease.duration_seconds / 2 else None


def restarted_in_place(pods: Iterable[ObservedPod]) -> list[ObservedPod]:
    """The pods whose trainer restarted in place past what their annotations expect (in_place.py)."""
    return [p for p in pods if p.restarted_undeclared]


def judge_stale_leases(job: TrainingJob, current: Iterable[ObservedPod], leases: Mapping[str, NodeLease],
                       warm_spares: int, now: datetime, excluded: Sequence[ExcludedNode] = ()) -> Decision:
    """NodeLost for the first current pod (lowest index) whose node's lease went stale, while a warm spare can
    take its rank or, restarting in place, while the other ranks' trainers restarted without it, with that node
    added to `excluded` (status.excludedNodes) for one lease duration; and, for a job with spares, a timer to
    look again.

    The node reads Ready until the node lifecycle controller sees the lease expire (its duration after the last
    renewal), then gets the unreachable NoSchedule taint. Until then the scheduler would place the lost rank's
    new pod or the spare pool's refill there, freed of its force-deleted pod: they are kept off it instead."""
    pods = list(current)
    restarted = restarted_in_place(pods) if restarts_in_place(job) else []
    if not warm_spares and not restarted:
        return Decision(requeue_after=LEASE_CHECK_SECONDS) if job.spec.spare_nodes else Decision()
    taker = "a warm spare takes its rank" if warm_spares else \
        f"the other ranks' trainers restarted in place without it ({len(restarted)}); a new pod takes its rank"
    for p in sorted(pods, key=lambda pod: pod.index):
        lease = leases.get(p.node or "")
        if (lease is None or p.terminating or p.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)
                or (restarted and p.restarted_undeclared)):
            continue
        age = stale_for(lease, now)
        if age is None or p.node is None:
            continue
        message = (f"pod {p.name} (node {p.index}): its node {p.node} has not renewed its lease for {age:.0f}s "
                   f"(leaseDurationSeconds {lease.duration_seconds}); {taker}")
        _, kept_off = exclude_node(excluded, p.node, Reason.NODE_LOST, f"its lease stale for {age:.0f}s",
                                   now=now, seconds=lease.duration_seconds)
        return Decision(status={"excluded_nodes": kept_off}, failure=Failure(
            Reason.NODE_LOST, message, reasons=frozenset({Reason.NODE_LOST}), node_loss=True, index=p.index,
            silent_node=p.node))
    return Decision(requeue_after=LEASE_CHECK_SECONDS if job.spec.spare_nodes else None)


# How often a held in-place restart looks at the leases again.
HOLD_CHECK_SECONDS = 1.0


def hold_for_leases(current: Iterable[ObservedPod], leases: Mapping[str, NodeLease], now: datetime) -> Decision:
    """A Restarting verdict while a trainer restarted in place and a pod that did not restart is on a node
    whose lease was not renewed since (no verdict: declare at once; so too without the leases, which a
    controller with no right to list them does not have)."""
    pods = list(current)
    restarted = restarted_in_place(pods)
    since = min((parse_time(p.preflight_started_at, now) for p in restarted if p.preflight_started_at), default=None)
    if since is None:
        return Decision()
    doubtful = []
    for p in pods:
        lease = leases.get(p.node or "")
        if p.restarted_undeclared or lease is None or lease.renewed is None:
            continue
        if parse_time(lease.renewed, now) <= since:  # whole seconds: a renewal in the restart's second is no proof
            doubtful.append(p)
    if not doubtful:
        return Decision()
    first = min(doubtful, key=lambda p: p.index)
    return Decision(requeue_after=HOLD_CHECK_SECONDS, verdict=Verdict(
        Phase.RESTARTING, Reason.RESTARTING_IN_PLACE,
        f"a trainer restarted in place; waiting for node {first.node} (of pod {first.name}) to renew its lease, "
        "to tell a crash from a lost node before the next attempt"))
