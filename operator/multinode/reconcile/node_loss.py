"""A node that stops answering: its pods are evicted but never go, and the gang must not wait for them.

When a kubelet dies, the node turns NotReady after the controller-manager's grace period and the taint
manager deletes its pods. Only the kubelet confirms a deletion, so those pods stay Terminating (phase
Running) until the machine comes back, possibly never. Two rules follow:
- a pod of the current attempt that someone else is deleting has lost its node: the attempt fails now
  (not counted against maxRestarts), instead of when the pod finally vanishes;
- a terminating pod whose node is not Ready (or gone) is force-deleted, so it neither blocks the next
  attempt (BlockingRecreate waits for the old pods) nor lingers. Its containers, if the node is only
  cut off, are not this attempt's: the next attempt has its own pod names and rendezvous.
"""

from __future__ import annotations

from collections.abc import Iterable

from multinode.api.conditions import Reason
from multinode.reconcile.failures import Failure, lost_failure
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.outcome import Event, Plan


def evicted_failure(current: Iterable[ObservedPod]) -> Failure | None:
    """The operator deletes current pods only on its way to another attempt or a final phase, so a current
    pod that is terminating (and did not succeed) was evicted, drained or deleted by someone else."""
    evicted = sorted((p for p in current if p.terminating and p.phase != PodPhase.SUCCEEDED), key=lambda p: p.index)
    if not evicted:
        return None
    first = evicted[0]
    return lost_failure(first.index, first.name, first.disruption or first.reason)


def stranded(pods: Iterable[ObservedPod], unreachable_nodes: frozenset[str]) -> list[ObservedPod]:
    """Terminating pods on nodes that are not Ready or no longer exist: no kubelet will finish them."""
    return [p for p in pods if p.terminating and p.node is not None and p.node in unreachable_nodes]


def force_delete_stranded(older: list[ObservedPod], unreachable_nodes: frozenset[str],
                          result: Plan) -> list[ObservedPod]:
    """Force-delete the earlier attempts' pods no kubelet will finish; the rest of `older`, still to wait for."""
    for p in stranded(older, unreachable_nodes):
        result.pods_to_force_delete.append(p.name)
        result.events.append(Event("Warning", Reason.POD_FORCE_DELETED,
                                   f"{p.name} of attempt {p.attempt} is stuck terminating on node {p.node}, "
                                   "which is not Ready: deleted without waiting for its kubelet"))
    return [p for p in older if p.name not in result.pods_to_force_delete]
