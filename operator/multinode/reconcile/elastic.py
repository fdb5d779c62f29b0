"""Elastic jobs (spec.elastic): train on fewer nodes after a loss, grow back when capacity returns.

The pods run torchrun with `--nnodes=min:numNodes` on a c10d rendezvous whose store is a pod of its own
(render/rendezvous_store.py), so the ranks regroup by themselves: a peer gone makes the workers' collectives
fail and every agent restarts its workers into a new rendezvous round without it; a new agent waiting makes
them restart into a round with it. The pods stay. The operator's part:

- shrink: a failure that is the node's, not the job's (a lost or preempted pod, a node that stopped
  answering or failed its health check, a straggler excluded) sheds that node's index instead of restarting
  the gang: its pod goes (force-deleted when its node is down), a row in status.elastic.shed keeps its UID so
  the old pod, still terminating, never counts again, and an Event says what is left. Not a restart: not
  counted, no new attempt. A pod failing on its own (the trainer's exit code) is the job's failure and goes
  to the failure policy as in any job.
- below minNodes: the nodes left wait in their rendezvous (torchrun's join timeout is set past ours); after
  elastic.belowMinTimeoutSeconds the attempt fails with BelowMinNodes, a node-loss restart of the gang.
- grow: a shed index gets a new pod (same name, same attempt) once elastic.resizeWindowSeconds have passed
  since the last resize; it may wait Pending until a machine is free. Once its trainer runs, its agent joins
  and the index is back (an Event): the row goes. The new pod joins no native PodGroup (the gang is placed:
  its minCount is bound) and keeps to the gang's topology domain by a node selector: Kubernetes 1.36's scheduler
  retries a PodGroup member it cannot place at once, again and again, whenever its queue is otherwise empty
  (backend/queue: no event-based requeueing for pod groups yet, and pods popped from backoff when the active
  queue is empty), which kept a core busy for as long as a shrunk job waited for a machine.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.elastic import MAX_SHED_ROWS, ElasticStatus, ShedNode
from multinode.api.status import GangMode
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.decision import Decision
from multinode.reconcile.failures import Failure
from multinode.reconcile.node_loss import NodeDown
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.outcome import Event, Verdict
from multinode.reconcile.placement import ObservedNode
from multinode.render.names import job_name, pod_name


def shed_indices(status: TrainingJobStatus) -> frozenset[int]:
    return frozenset(row.index for row in status.elastic.shed) if status.elastic else frozenset()


def without_shed(current: dict[int, ObservedPod], status: TrainingJobStatus) -> dict[int, ObservedPod]:
    """The attempt's pods but the shed ones (by UID: a shed pod's replacement has its name)."""
    if not status.elastic or not status.elastic.shed:
        return current
    gone = {row.uid for row in status.elastic.shed if row.uid}
    return {i: pod for i, pod in current.items() if pod.uid is None or pod.uid not in gone}


def split(current: dict[int, ObservedPod], status: TrainingJobStatus) -> tuple[dict[int, ObservedPod],
                                                                                 dict[int, ObservedPod]]:
    """(training, joining): the pods of indices not shed, and the new pods of shed ones, which count only
    once they are back (grow)."""
    shed = shed_indices(status)
    return ({i: p for i, p in current.items() if i not in shed}, {i: p for i, p in current.items() if i in shed})


def sheds(job: TrainingJob, status: TrainingJobStatus, failure: Failure) -> bool:
    """Whether an elastic job goes on without the failure's node instead of restarting: a failure that is the
    node's, not the job's (lost, preempted, drained; unhealthy; a straggler), and names its node."""
    if job.spec.elastic is None or failure.index is None or status.pods_attempt is not None:
        return False
    if not (failure.node_loss or failure.unhealthy_node or failure.straggler):
        return False
    shed = status.elastic.shed if status.elastic else []
    return failure.index not in {row.index for row in shed} and len(shed) < MAX_SHED_ROWS


def shrink(job: TrainingJob, status: TrainingJobStatus, training: dict[int, ObservedPod], failure: Failure,
           down: Mapping[str, NodeDown], now: datetime) -> Decision:
    """Shed the failure's node: its pod goes, the rest train on (sheds() said it may)."""
    assert job.spec.elastic is not None and failure.index is not None
    index, n, minimum = failure.index, job.spec.num_nodes, job.spec.elastic.min_nodes
    pod = training.get(index)
    row = ShedNode(index=index, pod=pod.name if pod else pod_name(job_name(job), index, status.attempt_of_pods),
                   uid=pod.uid if pod else None, reason=failure.reason, time=rfc3339(now))
    before = status.elastic or ElasticStatus()
    after = before.model_copy(update={"shed": [*before.shed, row], "resizes": before.resizes + 1,
                                      "last_resize_time": rfc3339(now)})
    left = sum(1 for i, p in training.items() if i != index and p.active)
    size = (f"training goes on at {left} of {n} nodes" if left >= minimum else
            f"{left} of {n} nodes left, below elastic.minNodes {minimum}: they wait for capacity up to "
            f"{job.spec.elastic.below_min_timeout_seconds}s")
    event = Event("Warning", Reason.ELASTIC_SHRUNK, f"node {index} shed ({failure.reason}: {failure.message}); {size}")
    # Its pod goes: at once from a node that is down (no kubelet would confirm), gracefully otherwise.
    force = pod is not None and (pod.node or "") in down
    delete = pod is not None and not force and not pod.terminating and pod.phase != PodPhase.SUCCEEDED
    return Decision(status={"elastic": after}, events=(event,), delete=(pod.name,) if pod and delete else (),
                    force_delete=(pod.name,) if pod and force else ())


def grow(job: TrainingJob, status: TrainingJobStatus, joining: dict[int, ObservedPod],
         training: dict[int, ObservedPod], now: datetime) -> Decision:
    """Shed indices whose new pod's trainer runs: back in the job (its agent joins the next round)."""
    if not status.elastic or not joining:
        return Decision()
    back = {i: p for i, p in joining.items() if p.phase == PodPhase.RUNNING and p.started_at and not p.terminating}
    failed = [p.name for p in joining.values() if p.phase == PodPhase.FAILED and not p.terminating]
    if not back:
        # Made again one window later (the window counts from now: a pod that keeps failing is not made in a loop).
        later = {"elastic": status.elastic.model_copy(update={"last_resize_time": rfc3339(now)})} if failed else {}
        return Decision(delete=tuple(failed), status=later)
    rows = [row for row in status.elastic.shed if row.index not in back]
    after = status.elastic.model_copy(update={"shed": rows, "resizes": status.elastic.resizes + 1,
                                              "last_resize_time": rfc3339(now)})
    size = sum(1 for p in training.values() if p.phase == PodPhase.RUNNING) + len(back)
    names = ", ".join(f"node {i} ({p.name} on {p.node})" for i, p in sorted(back.items()))
    return Decision(status={"elastic": after}, delete=tuple(failed), events=(Event(
        "Normal", Reason.ELASTIC_GREW, f"{names} back: training grows to {size} of {job.spec.num_nodes} nodes"),))


def due_indices(job: TrainingJob, status: TrainingJobStatus, missing: Collection[int],
                now: datetime) -> tuple[list[int], float | None]:
    """Of the missing indices, those whose pod is made now: all but shed ones within the resize window (one
    grow per window: nodes back together join one round); and when to look again for those."""
    shed = shed_indices(status)
    if job.spec.elastic is None or not shed or not status.elastic or not status.elastic.last_resize_time:
        return list(missing), None
    opens = parse_time(status.elastic.last_resize_time, now) + timedelta(
        seconds=job.spec.elastic.resize_window_seconds)
    if now >= opens:
        return list(missing), None
    return [i for i in missing if i not in shed], (opens - now).total_seconds()


def grow_outside_group(job: TrainingJob, status: TrainingJobStatus, training: Mapping[int, ObservedPod],
                       nodes: Collection[ObservedNode]) -> tuple[frozenset[int], dict[str, str] | None]:
    """The shed indices whose new pod joins no native PodGroup, and the node selector it has instead (the
    gang's topology domain: status.topologyDomain, or the label of a node a training pod is on). Only the
    native gang: a Volcano or coscheduling pod needs its scheduler's name and group. With spec.topology and no
    domain known, the pod joins the group, which keeps it in the gang's."""
    if status.scheduling is None or status.scheduling.gang != GangMode.POD_GROUP:
        return frozenset(), None
    if job.spec.topology is None:
        return shed_indices(status), None
    key = job.spec.topology.same_domain_label
    labels = {node.name: node.labels for node in nodes}
    domain = status.topology_domain or next(
        (value for pod in training.values() if pod.node and (value := labels.get(pod.node, {}).get(key))), None)
    return (shed_indices(status), {key: domain}) if domain else (frozenset(), None)


def elastic_verdict(job: TrainingJob, status: TrainingJobStatus, training: dict[int, ObservedPod],
                    now: datetime) -> Decision:
    """While nodes are shed: Succeeded once every node training did (torchrun's agents finish together; the
    shed ones' new pods, if any, go); RunningReduced at minNodes or more; below, BelowMinNodes while the nodes
    left wait, and the attempt's failure once they waited elastic.belowMinTimeoutSeconds."""
    elastic = job.spec.elastic
    if elastic is None or not status.elastic or not status.elastic.shed:
        return Decision(status={"elastic": status.elastic.model_copy(update={"below_min_since": None})}
                        if status.elastic and status.elastic.below_min_since else {})
    n, minimum = job.spec.num_nodes, elastic.min_nodes
    if training and all(p.phase == PodPhase.SUCCEEDED for p in training.values()):
        return Decision(verdict=Verdict(Phase.SUCCEEDED, Reason.ALL_NODES_SUCCEEDED,
                                        f"all {len(training)} nodes training succeeded ({n - len(training)} of "
                                        f"{n} shed)"))
    live = sum(1 for p in training.values() if p.phase == PodPhase.RUNNING)
    shed = ", ".join(f"node {row.index} ({row.reason})" for row in status.elastic.shed[:5])
    if live >= minimum:
        return Decision(status={"elastic": status.elastic.model_copy(update={"below_min_since": None})},
                        verdict=Verdict(Phase.RUNNING, Reason.RUNNING_REDUCED,
                                        f"training on {live} of {n} nodes (elastic.minNodes {minimum}); shed: {shed}"))
    since = parse_time(status.elastic.below_min_since, now) if status.elastic.below_min_since else now
    waited = (now - since).total_seconds()
    words = (f"{live} of {n} nodes running, below elastic.minNodes {minimum} (shed: {shed}); waiting for "
             "capacity")
    kept = {"elastic": status.elastic.model_copy(update={"below_min_since": rfc3339(since)})}
    if waited >= elastic.below_min_timeout_seconds:
        return Decision(status=kept, failure=Failure(
            Reason.BELOW_MIN_NODES, f"{words} for {elastic.below_min_timeout_seconds}s "
                                    "(elastic.belowMinTimeoutSeconds): the gang restarts whole",
            reasons=frozenset({Reason.BELOW_MIN_NODES, Reason.NODE_LOST}), node_loss=True))
    return Decision(status=kept, requeue_after=elastic.below_min_timeout_seconds - waited, verdict=Verdict(
        Phase.RUNNING, Reason.BELOW_MIN_NODES,
        f"{words} (up to {elastic.below_min_timeout_seconds - waited:.0f}s more)"))
