"""An elastic job's rendezvous store pod (render/rendezvous_store.py): made once the attempt's pods are placed,
off their machines; kept; its loss the attempt's failure.

- Made after the gang is placed, not with it: made together, each side's anti-affinity is only a preference
  to the other's placement, and a full run found a rank beside the store with a machine of the pool free.
  Placed after, the store is required off the gang's machines by name. A gang pod the scheduler refused holds
  it back for REFUSED_GRACE_SECONDS, then no longer (a pool too small for the gang still gets its store).
- No other machine fits it (a job as large as its pool): the scheduler says so (Unschedulable), the store,
  which never ran, goes and is made again without that requirement, sharing a machine (its preferred
  anti-affinity still weighs); a Warning Event and status.elastic.storeShared say that losing that machine
  restarts the gang.
- Once placed, its UID is kept (status.elastic.storeUid) and its loss (gone, deleted, failed, on a node that is
  down) is the attempt's failure: a new store would hold none of the rendezvous the agents are in. A store
  not placed yet holds none: deleted or gone, it is made again.
"""

from __future__ import annotations

from multinode.api.conditions import Reason
from multinode.api.elastic import ElasticStatus
from multinode.api.timestamps import parse_time
from multinode.reconcile.decision import Decision
from multinode.reconcile.failures import Failure
from multinode.reconcile.image_consistency import pinned_image
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.outcome import Event
from multinode.reconcile.planning_pass import Pass
from multinode.render.names import job_name
from multinode.render.rendezvous_store import render_store_pod, store_pod_name


# How long a pod the scheduler refused holds the store back: past kube-scheduler's longest backoff
# (podMaxBackoffSeconds, 10 s), so that it was tried again after whatever freed a machine. The store, a pod of
# no group, is tried again at once on that event; a PodGroup member only after its backoff (1.36 has no
# event-based requeueing for pod groups), and a machine just freed (a node turning Ready) went to the store.
REFUSED_GRACE_SECONDS = 15.0


def gang_nodes(p: Pass, current: dict[int, ObservedPod], min_nodes: int) -> list[str] | None:
    """The machines of the attempt's pods once it is placed: none waits to be made or placed (a pod the
    scheduler refused for REFUSED_GRACE_SECONDS does not hold the store back; until then, the pass comes
    again when it would not) and at least `min_nodes` have a node; else None."""
    if len(p.result.pods_to_create):
        return None
    waits = []
    for pod in current.values():
        if pod.node is not None:
            continue
        if not pod.unschedulable:
            return None
        if pod.unschedulable_since is None:
            continue  # refused since when, unknown: it does not hold the store back
        left = REFUSED_GRACE_SECONDS - (p.now - parse_time(pod.unschedulable_since, p.now)).total_seconds()
        if left > 0:
            waits.append(left)
    if waits:
        p.take(Decision(requeue_after=max(waits)))
        return None
    nodes = sorted({pod.node for pod in current.values() if pod.node})
    return nodes if len(nodes) >= min_nodes else None


def keep_store(p: Pass, current: dict[int, ObservedPod]) -> Failure | None:
    """The attempt's store: earlier attempts' deleted; this one's made, made again sharing a machine, kept, or
    its loss returned as the attempt's failure."""
    job, status, stores, down = p.job, p.status, p.observed.rendezvous_stores, p.observed.down_nodes
    attempt = status.attempt_of_pods
    old = [s for s in stores if s.attempt != attempt and not s.terminating]
    p.take(Decision(delete=tuple(s.name for s in old if (s.node or "") not in down),
                    force_delete=tuple(s.name for s in old if (s.node or "") in down)))
    if job.spec.elastic is None:
        return None
    elastic = status.elastic or ElasticStatus()
    known = elastic.store_uid
    store = next((s for s in stores if s.attempt == attempt), None)
    if known is None:
        if store is None:
            nodes = gang_nodes(p, current, job.spec.elastic.min_nodes)
            if nodes is not None:
                p.result.objects_to_create.append(render_store_pod(
                    job, attempt, image=pinned_image(job, status), off_nodes=() if elastic.store_shared else nodes))
            return None
        if store.node is None:
            if store.unschedulable and not store.terminating and not elastic.store_shared:
                p.take(share_store(store, elastic))
            return None
        p.take(Decision(status={"elastic": elastic.model_copy(update={"store_uid": store.uid})}))
        known = store.uid
    if current and all(pod.phase == PodPhase.SUCCEEDED for pod in current.values()):
        return None  # training is over: the store has served its purpose
    why = ("is gone" if store is None or store.uid != known else "was deleted" if store.terminating
           else "is on a node that is down" if (store.node or "") in down
           else f"ended ({store.phase})" if store.phase in (PodPhase.FAILED, PodPhase.SUCCEEDED) else None)
    if why is None:
        return None
    name = store.name if store is not None else store_pod_name(job_name(job), attempt)
    return Failure(Reason.RENDEZVOUS_LOST, f"the rendezvous store's pod {name} {why}: the gang restarts with a new one",
                   reasons=frozenset({Reason.RENDEZVOUS_LOST, Reason.NODE_LOST}), node_loss=True)


def share_store(store: ObservedPod, elastic: ElasticStatus) -> Decision:
    """No machine without a training pod fits the store: it goes (it never ran) to be made again sharing one."""
    event = Event("Warning", Reason.RENDEZVOUS_STORE_SHARED,
                  f"no machine without a training pod can take the rendezvous store ({store.unschedulable}): it "
                  "shares one; losing that machine restarts the gang")
    return Decision(delete=(store.name,), events=(event,),
                    status={"elastic": elastic.model_copy(update={"store_shared": True})})
