"""A node that stops answering: the gang restarts elsewhere within seconds of the node turning NotReady,
instead of five minutes later, and the old attempt's pods never hold it up.

On a stock cluster a dead kubelet's node turns NotReady (Ready Unknown) about 40 s after its last heartbeat
(kube-controller-manager's --node-monitor-grace-period), and its pods are evicted only when their
not-ready/unreachable toleration runs out: 300 s by default. Three rules:
- a current pod on a node whose Ready condition has been False or Unknown longer than the pod tolerates
  (spec.failurePolicy.nodeLossTolerationSeconds, rendered as those tolerations; render/tolerations.py) is
  lost: the attempt fails now with NodeLost, not counted against maxRestarts. The wait is the debounce: a
  node that flaps back to Ready within it costs nothing. A node missing from the operator's index is left
  to the pod garbage collector (the index may simply lag behind a node that just registered);
- a current pod that someone else is deleting (the taint manager's eviction, a drain) has lost its node
  too: the attempt fails at once instead of when the pod finally vanishes;
- an earlier attempt's pod on a node that is not Ready (or gone) is force-deleted: only its kubelet would
  confirm a graceful deletion, and BlockingRecreate would wait for it forever. If the node was only cut off
  and its containers still run, they are fenced off: the next attempt has its own pod names, rendezvous
  port and id (render/env.py), and observe.py counts only pods labelled with the current attempt.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from multinode.api import TrainingJob
from multinode.api.conditions import Reason
from multinode.api.constants import TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE
from multinode.api.timestamps import parse_time
from multinode.reconcile.failures import Failure, lost_failure
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.decision import Decision
from multinode.reconcile.outcome import Event
from multinode.reconcile.placement import ObservedNode
from multinode.render.tolerations import pod_tolerations, tolerated_seconds

GONE = "Gone"
# Still Ready, but its kubelet stopped renewing the node's Lease (lease_loss.py): as unanswering as Unknown.
LEASE_STALE = "LeaseStale"
# Ready=False is tainted not-ready, Ready=Unknown (no heartbeat) unreachable: each has its own toleration.
_TAINT_OF_STATUS = {"False": TAINT_NODE_NOT_READY, "Unknown": TAINT_NODE_UNREACHABLE}


@dataclass(frozen=True)
class NodeDown:
    """A node hosting the job's pods whose Ready condition is not True, that no longer exists, or (for the
    force deletion of a pass that found it so) whose Lease went stale (lease_loss.py)."""

    status: str  # "False", "Unknown", GONE or LEASE_STALE
    since: str | None = None  # the Ready condition's lastTransitionTime

    @property
    def words(self) -> str:
        if self.status == GONE:
            return "is gone"
        if self.status == LEASE_STALE:
            return "has stopped renewing its Lease"
        state = "NotReady" if self.status == "False" else "unreachable (Ready Unknown: no heartbeat)"
        return f"is {state} since {self.since or 'an unknown time'}"


def node_down(node: ObservedNode | None) -> NodeDown | None:
    """What node_loss needs of a node (None: the node index has no such node); None when it is Ready."""
    if node is None:
        return NodeDown(GONE)
    if node.ready_status == "True":
        return None
    return NodeDown(node.ready_status, node.ready_since)


def seconds_left(tolerations: Iterable[Mapping[str, Any]], node: NodeDown, now: datetime) -> float | None:
    """How much longer a pod with `tolerations` may stay on the down `node` (<= 0: no longer); None when it
    tolerates it forever. The taint manager evicts it then; the operator acts on the same answer."""
    grace = tolerated_seconds(tolerations, _TAINT_OF_STATUS.get(node.status, TAINT_NODE_UNREACHABLE))
    if grace is None:
        return None
    since = parse_time(node.since, now) if node.since else now
    return grace - (now - since).total_seconds()


def judge_down_nodes(job: TrainingJob, current: Iterable[ObservedPod], down: Mapping[str, NodeDown],
                     now: datetime) -> Decision:
    """NodeLost for the first current pod (lowest index) whose node has been down longer than the pod
    tolerates; for a node still within the toleration, a timer for when it runs out."""
    if not down:
        return Decision()
    timers = []
    tolerations = pod_tolerations(job)
    for p in sorted(current, key=lambda pod: pod.index):
        node = down.get(p.node or "")
        if node is None or node.status == GONE or p.terminating or p.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
            continue
        left = seconds_left(tolerations, node, now)
        if left is None:  # the user's podTemplate tolerates it forever
            continue
        if left > 0:
            timers.append(left)
            continue
        return Decision(requeue_after=min(timers, default=None), failure=Failure(
            Reason.NODE_LOST, f"pod {p.name} (node {p.index}): its node {p.node} {node.words}; "
                              "the gang cannot continue without it",
            reasons=frozenset({Reason.NODE_LOST}), node_loss=True, index=p.index))
    return Decision(requeue_after=min(timers, default=None))


def evicted_failure(current: Iterable[ObservedPod]) -> Failure | None:
    """The operator deletes current pods only on its way to another attempt or a final phase, so a current
    pod that is terminating (and did not succeed) was evicted, drained or deleted by someone else."""
    evicted = sorted((p for p in current if p.terminating and p.phase != PodPhase.SUCCEEDED), key=lambda p: p.index)
    if not evicted:
        return None
    first = evicted[0]
    return lost_failure(first.index, first.name, first.disruption or first.reason)


# Events per pass for force-deleted pods; the rest are summed up in one more.
MAX_FORCE_DELETE_EVENTS = 10


def force_delete_stranded(pods: Iterable[ObservedPod], down: Mapping[str, NodeDown], *,
                          deleting: Collection[str] = (), forcing: Collection[str] = ()) -> Decision:
    """Delete without waiting for a kubelet (grace period 0) the pods among `pods` that are on their way out
    (terminating, or among the pass's deletions, `deleting`) on nodes that are down: no kubelet will finish
    them. `forcing`: the pods the pass force-deletes already."""
    if not down:
        return Decision()
    forced: list[str] = []
    events: list[Event] = []
    seen = set(forcing)
    for p in pods:
        node = down.get(p.node or "")
        if node is None or p.name in seen:
            continue
        if not (p.terminating or p.name in deleting):
            continue
        seen.add(p.name)
        forced.append(p.name)
        if len(forced) <= MAX_FORCE_DELETE_EVENTS:  # a lost rack of a 20 000-node gang: not 1000s of Events
            events.append(Event("Warning", Reason.POD_FORCE_DELETED,
                                f"{p.name} of attempt {p.attempt} is on node {p.node}, which {node.words}: "
                                "deleted without waiting for its kubelet"))
    if len(forced) > MAX_FORCE_DELETE_EVENTS:
        events.append(Event("Warning", Reason.POD_FORCE_DELETED,
                            f"{len(forced) - MAX_FORCE_DELETE_EVENTS} more pods on nodes that are down "
                            "deleted without waiting for their kubelets"))
    return Decision(force_delete=tuple(forced), events=tuple(events))
