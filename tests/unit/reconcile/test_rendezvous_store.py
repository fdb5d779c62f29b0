"""An elastic job's rendezvous store pod (rendezvous_store.py), through the planner: made once the attempt's
pods are placed, required off their machines; made again sharing one when no other machine fits it; kept once
placed, and its loss restarts the gang; earlier attempts' stores go."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from multinode.api.conditions import Reason
from multinode.api.constants import LABEL_RENDEZVOUS_STORE
from multinode.api.timestamps import rfc3339
from multinode.reconcile.rendezvous_store import REFUSED_GRACE_SECONDS
from multinode.testing import stored_job
from tests.unit.reconcile.elastic_jobs import elastic_job, gang, node_pod, running_plan, store_pod
from tests.unit.reconcile.planning import NOW, run

NO_ROOM = "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."


def _stores(plan) -> list[dict]:
    return [o for o in plan.objects_to_create if o["metadata"]["labels"].get(LABEL_RENDEZVOUS_STORE)]


def _off_nodes(store: dict) -> list[str]:
    required = store["spec"]["affinity"].get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return [v for term in (required or {}).get("nodeSelectorTerms", []) for field in term["matchFields"]
            for v in field["values"]]


def test_the_store_is_made_once_the_attempts_pods_are_placed_off_their_machines() -> None:
    job = elastic_job()
    created = run(job, [])
    assert len(created.pods_to_create) == 3 and _stores(created) == [], "not with the pods: after them"
    unplaced = [node_pod(0), node_pod(1, "Pending", node=None), node_pod(2)]
    assert _stores(run(job, unplaced, previous=created.status)) == [], "a pod still to be placed"
    (store,) = _stores(run(job, gang(), previous=created.status))
    assert store["metadata"]["name"] == "llama-rdzv-a0"
    assert _off_nodes(store) == ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
    # A pod the scheduler cannot place does not hold the store back once minNodes are placed; fewer do.
    no_room = [node_pod(0), node_pod(1, "Pending", node=None, unschedulable=NO_ROOM), node_pod(2)]
    (store,) = _stores(run(job, no_room, previous=created.status))
    assert _off_nodes(store) == ["gpu-node-0", "gpu-node-2"]
    below_min = [node_pod(0), node_pod(1, "Pending", node=None, unschedulable=NO_ROOM),
                 node_pod(2, "Pending", node=None, unschedulable=NO_ROOM)]
    assert _stores(run(job, below_min, previous=created.status)) == []
    # A job that is not elastic has none.
    assert _stores(run(stored_job(3), gang())) == []


def test_a_pod_refused_just_now_holds_the_store_back_past_the_schedulers_longest_backoff() -> None:
    # A machine freed (a node turning Ready) is the store's at once, a PodGroup member's after its backoff.
    job = elastic_job()
    created = run(job, [])
    refused_at = NOW - timedelta(seconds=4)
    just_refused = [node_pod(0), node_pod(1, "Pending", node=None, unschedulable=NO_ROOM,
                                          unschedulable_since=rfc3339(refused_at)), node_pod(2)]
    held = run(job, just_refused, previous=created.status)
    assert _stores(held) == [] and held.requeue_after is not None
    assert held.requeue_after <= REFUSED_GRACE_SECONDS - 4
    later = run(job, just_refused, previous=created.status,
                now=refused_at + timedelta(seconds=REFUSED_GRACE_SECONDS))
    (store,) = _stores(later)
    assert _off_nodes(store) == ["gpu-node-0", "gpu-node-2"]


def test_a_store_no_machine_without_a_training_pod_fits_is_made_again_sharing_one() -> None:
    job = elastic_job()
    made = run(job, gang())
    waiting = store_pod(node=None, phase="Pending")
    assert run(job, gang(), previous=made.status, rendezvous_stores=(waiting,)).pods_to_delete == [], \
        "not placed yet: the scheduler has not said"
    refused = store_pod(node=None, phase="Pending", unschedulable=NO_ROOM)
    shared = run(job, gang(), previous=made.status, rendezvous_stores=(refused,))
    assert shared.pods_to_delete == ["llama-rdzv-a0"] and shared.status.phase == Phase.RUNNING, "it never ran"
    assert shared.status.elastic is not None and shared.status.elastic.store_shared is True
    assert shared.status.elastic.store_uid is None and shared.status.restarts == 0
    (event,) = [e for e in shared.events if e.reason == Reason.RENDEZVOUS_STORE_SHARED]
    assert event.type == "Warning" and NO_ROOM in event.message and "restarts the gang" in event.message
    # Gone: made again without the requirement (the preferred term still weighs); refused again, it stays.
    (again,) = _stores(run(job, gang(), previous=shared.status, rendezvous_stores=()))
    assert _off_nodes(again) == [] and again["spec"]["affinity"]["podAntiAffinity"]
    stays = run(job, gang(), previous=shared.status, rendezvous_stores=(refused,))
    assert stays.pods_to_delete == [] and not _stores(stays)
    # Placed: kept as any store; the next attempt tries a machine of its own again.
    placed = run(job, gang(), previous=shared.status, rendezvous_stores=(store_pod(node="gpu-node-1"),))
    assert placed.status.elastic.store_uid == "store-uid-0" and placed.status.elastic.store_shared is True
    lost = run(job, gang(), previous=placed.status, rendezvous_stores=())
    assert lost.status.phase == Phase.RESTARTING and lost.status.elastic.store_shared is None


def test_a_store_not_placed_yet_holds_no_rendezvous_deleted_it_is_made_again() -> None:
    job = elastic_job()
    made = run(job, gang())
    deleted = run(job, gang(), previous=made.status,
                  rendezvous_stores=(store_pod(node=None, phase="Pending", terminating=True),))
    assert deleted.status.phase != Phase.RESTARTING and deleted.status.restarts == 0
    again = run(job, gang(), previous=deleted.status, rendezvous_stores=())
    assert [s["metadata"]["name"] for s in _stores(again)] == ["llama-rdzv-a0"]


def test_a_store_once_placed_is_kept_and_its_loss_restarts_the_gang_uncounted() -> None:
    job = elastic_job()
    running = running_plan(job)
    assert running.status.elastic is not None and running.status.elastic.store_uid == "store-uid-0"
    for stores in [(store_pod(phase="Failed"),), (), (store_pod(terminating=True),), (store_pod(uid="another"),)]:
        lost = run(job, gang(), previous=running.status, rendezvous_stores=stores)
        assert lost.status.phase == Phase.RESTARTING, stores
        record = lost.status.restart_history[-1]
        assert record.reason == Reason.RENDEZVOUS_LOST and not record.counted
        assert lost.status.elastic is not None and lost.status.elastic.store_uid is None, "the next has its own"
        assert not _stores(lost)


def test_earlier_attempts_stores_go() -> None:
    job = elastic_job()
    seen = running_plan(job)
    later = seen.status.model_copy(update={"attempt": 1})
    stale = run(job, [], previous=later, rendezvous_stores=(store_pod(0),))
    assert "llama-rdzv-a0" in stale.pods_to_delete
