"""A node whose kubelet stops renewing its Lease loses its rank to a hot spare (spec.spareNodes), without
waiting for the node's Ready condition.

On stock settings a kubelet renews its Lease every 10 s (a quarter of its 40 s leaseDurationSeconds), and the
node lifecycle controller turns the node NotReady (Ready Unknown) only once the lease is 40 s old; the pods'
node-loss toleration comes on top (node_loss.py). With a warm spare waiting, the gang need not wait that long:
a current pod whose node's lease is older than half its duration (two renewals missed) is lost now. A false
alarm (a kubelet that only fell behind) costs a spare swap, which is what a spare is for; so the check runs
only while a warm spare can take the rank. The lost pod's old attempt is fenced off as any other: the gang's
next attempt has its own rendezvous port and id (render/in_place.py).

Which of the two came first matters too. A node that dies takes its rank with it, and the other ranks'
collectives fail at once: their trainers exit and restart in place before the dead node's lease is stale.
Declared then, their new attempt would look for the rendezvous at the dead rank 0 (torchrun's agent waits
there, in no process the operator's next attempt can stop) and count a restart that was no fault of the job.
So, while a warm spare waits, a trainer restarted in place is held at its preflight barrier until every pod
that did not restart has its node renew its lease after that restart (≤ 10 s on stock settings, the cost of
telling a crash from a dead node); a lease that goes stale instead makes it the node's loss, the spare takes
the rank, and one attempt follows, uncounted.

Leases are not watched (every kubelet writes one every 10 s): the controller reads them from the apiserver's
watch cache, shared by every job (controller/node_leases.py), and a job with spares comes back every
LEASE_CHECK_SECONDS to look again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from multinode.api import Phase, TrainingJob
from multinode.api.conditions import Reason
from multinode.api.timestamps import parse_time
from multinode.reconcile.decision import Decision
from multinode.reconcile.failures import Failure
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.outcome import Verdict

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


def judge_stale_leases(job: TrainingJob, current: Iterable[ObservedPod], leases: Mapping[str, NodeLease],
                       warm_spares: int, now: datetime) -> Decision:
    """NodeLost for the first current pod (lowest index) whose node's lease went stale, while a warm spare can
    take its rank; and, for a job with spares, a timer to look again."""
    if not job.spec.spare_nodes:
        return Decision()
    if not warm_spares:
        return Decision(requeue_after=LEASE_CHECK_SECONDS)
    for p in sorted(current, key=lambda pod: pod.index):
        lease = leases.get(p.node or "")
        if lease is None or p.terminating or p.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
            continue
        age = stale_for(lease, now)
        if age is None:
            continue
        return Decision(failure=Failure(
            Reason.NODE_LOST, f"pod {p.name} (node {p.index}): its node {p.node} has not renewed its lease for "
                              f"{age:.0f}s (leaseDurationSeconds {lease.duration_seconds}); a warm spare takes its "
                              "rank", reasons=frozenset({Reason.NODE_LOST}), node_loss=True, index=p.index))
    return Decision(requeue_after=LEASE_CHECK_SECONDS)


# How often a held in-place restart looks at the leases again.
HOLD_CHECK_SECONDS = 1.0


def hold_for_leases(job: TrainingJob, current: Iterable[ObservedPod], leases: Mapping[str, NodeLease],
                    warm_spares: int, now: datetime) -> Decision:
    """A Restarting verdict while a trainer restarted in place and a pod that did not restart is on a node
    whose lease was not renewed since (with a warm spare waiting; else no verdict: declare at once)."""
    if not job.spec.spare_nodes or not warm_spares:
        return Decision()
    pods = list(current)
    restarted = [p for p in pods if p.trainer_restarts > p.in_place_trainer_restarts]
    since = min((parse_time(p.preflight_started_at, now) for p in restarted if p.preflight_started_at), default=None)
    if since is None:
        return Decision()
    doubtful = []
    for p in pods:
        lease = leases.get(p.node or "")
        if p in restarted or lease is None or lease.renewed is None:
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
