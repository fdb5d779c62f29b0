"""Elastic jobs (elastic.py), through the planner: a lost node is shed and the rest train on (not a restart);
below minNodes they wait, then the gang restarts; a shed index gets a new pod after the resize window and is
back once its trainer runs; the rendezvous store is made with the attempt and its loss restarts the gang; the
job succeeds when the nodes training do."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from multinode.api.conditions import ConditionType, Reason
from multinode.api.constants import LABEL_RENDEZVOUS_STORE
from multinode.reconcile.elastic import sheds
from multinode.reconcile.failures import Failure
from multinode.reconcile.node_loss import NodeDown
from multinode.reconcile.observe import RENDEZVOUS_STORE_INDEX, ObservedPod
from tests.unit.reconcile.planning import NOW, condition, pod, run, running_mirror

DEAD = {"gpu-node-1": NodeDown("Unknown", "2026-11-20T11:50:00Z")}
STARTED = "2026-11-20T11:00:00Z"


def _job(nodes=3, minimum=2, **elastic):
    return _stored(nodes, elastic={"minNodes": minimum, **elastic})


def _stored(nodes, **spec):
    from multinode.testing import stored_job
    return stored_job(nodes, **spec)


def _pod(index, phase="Running", *, uid=None, **kw):
    kw.setdefault("node", f"gpu-node-{index}")
    return pod(index, phase, uid=uid or f"uid-{index}", started_at=STARTED if phase == "Running" else None, **kw)


def _store(attempt=0, phase="Running", **kw):
    kw.setdefault("uid", f"store-uid-{attempt}")
    return ObservedPod(name=f"llama-rdzv-a{attempt}", job_name="llama", index=RENDEZVOUS_STORE_INDEX,
                       attempt=attempt, phase=phase, node="cpu-node", **kw)


def _gang(n=3):
    return [_pod(i) for i in range(n)]


def _running(job, n=3):
    first = run(job, [], rendezvous_stores=())
    return run(job, _gang(n), previous=first.status, rendezvous_stores=(_store(),))


def test_the_store_pod_is_made_with_the_attempts_pods_and_earlier_ones_go() -> None:
    job = _job()
    created = run(job, [])
    stores = [o for o in created.objects_to_create if o["metadata"]["labels"].get(LABEL_RENDEZVOUS_STORE)]
    assert [s["metadata"]["name"] for s in stores] == ["llama-rdzv-a0"]
    assert len(created.pods_to_create) == 3
    # Seen: not made again; a store of an earlier attempt is deleted.
    seen = run(job, _gang(), previous=created.status, rendezvous_stores=(_store(0),))
    assert not [o for o in seen.objects_to_create if o["metadata"]["labels"].get(LABEL_RENDEZVOUS_STORE)]
    later = seen.status.model_copy(update={"attempt": 1})
    stale = run(job, [], previous=later, rendezvous_stores=(_store(0),))
    assert "llama-rdzv-a0" in stale.pods_to_delete
    # A job that is not elastic has none.
    assert not [o for o in run(_stored(3), []).objects_to_create
                if o["metadata"]["labels"].get(LABEL_RENDEZVOUS_STORE)]


def test_a_deleted_pod_is_shed_and_the_rest_train_on_without_a_restart() -> None:
    job = _job()
    running = _running(job)
    gone = run(job, [_pod(0), _pod(1, terminating=True), _pod(2)], previous=running.status,
               rendezvous_stores=(_store(),))
    status = gone.status
    assert status.phase == Phase.RUNNING
    assert (status.attempt, status.restarts, status.uncounted_restarts) == (0, 0, 0), "not a restart"
    assert status.elastic is not None and [(r.index, r.uid) for r in status.elastic.shed] == [(1, "uid-1")]
    assert status.elastic.resizes == 1 and status.current_nodes == 2
    assert condition(status, ConditionType.RUNNING).reason == Reason.RUNNING_REDUCED
    assert [e.reason for e in gone.events] == [Reason.ELASTIC_SHRUNK]
    assert "training goes on at 2 of 3 nodes" in gone.events[0].message
    assert gone.pods_to_delete == [] and gone.pods_to_force_delete == [], "already terminating"
    # The old pod, still terminating, never counts again; no new pod within the resize window.
    later = run(job, [_pod(0), _pod(1, terminating=True), _pod(2)], previous=status, now=NOW + timedelta(seconds=5),
                rendezvous_stores=(_store(),))
    assert later.status.elastic is not None and len(later.status.elastic.shed) == 1
    assert later.events == [] and later.status.restarts == 0
    assert len(later.pods_to_create) == 0 and later.requeue_after is not None and later.requeue_after <= 25


def test_a_lost_node_is_force_deleted_and_shed() -> None:
    job = _job()
    running = _running(job)
    lost = run(job, _gang(), previous=running.status, down_nodes=DEAD, rendezvous_stores=(_store(),))
    assert lost.status.phase == Phase.RUNNING and lost.status.restarts == 0
    assert lost.pods_to_force_delete == ["llama-1-a0"]
    assert lost.status.elastic is not None and lost.status.elastic.shed[0].reason == Reason.NODE_LOST


def test_a_trainer_that_fails_on_its_own_restarts_the_gang_as_in_any_job() -> None:
    job = _job()
    running = _running(job)
    failed = run(job, [_pod(0), _pod(1, "Failed", exit_code=1, reason="Error"), _pod(2)], previous=running.status,
                 rendezvous_stores=(_store(),))
    assert failed.status.phase == Phase.RESTARTING and failed.status.restarts == 1
    assert not failed.status.elastic or not failed.status.elastic.shed


def _shed_one(job):
    running = _running(job)
    return run(job, [_pod(0), _pod(1, terminating=True), _pod(2)], previous=running.status,
               rendezvous_stores=(_store(),))


def test_after_the_window_the_shed_index_gets_a_new_pod_and_is_back_once_it_runs() -> None:
    job = _job(resizeWindowSeconds=30)
    shed = _shed_one(job)
    after = NOW + timedelta(seconds=31)
    made = run(job, [_pod(0), _pod(2)], previous=shed.status, now=after, rendezvous_stores=(_store(),))
    assert [p["metadata"]["name"] for p in made.pods_to_create] == ["llama-1-a0"]
    assert made.status.phase == Phase.RUNNING and made.status.restarts == 0
    # Pending (no machine yet): still shed, still training on 2; no startup timeout for it.
    pending = run(job, [_pod(0), _pod(1, "Pending", uid="uid-1b", node=None), _pod(2)], previous=made.status,
                  now=after + timedelta(hours=2), rendezvous_stores=(_store(),))
    assert pending.status.phase == Phase.RUNNING and pending.status.restarts == 0
    assert pending.status.elastic is not None and len(pending.status.elastic.shed) == 1
    # Its trainer runs: back, an Event, full size.
    back = run(job, [_pod(0), _pod(1, uid="uid-1b"), _pod(2)], previous=pending.status,
               now=after + timedelta(hours=2, seconds=5), rendezvous_stores=(_store(),))
    assert back.status.elastic is not None and back.status.elastic.shed == []
    assert back.status.elastic.resizes == 2 and back.status.current_nodes == 3
    assert [e.reason for e in back.events] == [Reason.ELASTIC_GREW]
    assert "grows to 3 of 3" in back.events[0].message
    assert condition(back.status, ConditionType.RUNNING).reason == Reason.ALL_NODES_RUNNING


def test_below_min_waits_then_the_gang_restarts_uncounted() -> None:
    job = _job(nodes=2, minimum=2, belowMinTimeoutSeconds=60)
    running = _running(job, n=2)
    gone = run(job, [_pod(0), _pod(1, terminating=True)], previous=running.status, rendezvous_stores=(_store(),))
    status = gone.status
    assert status.phase == Phase.RUNNING and status.restarts == 0
    running_condition = condition(status, ConditionType.RUNNING)
    assert running_condition.reason == Reason.BELOW_MIN_NODES and running_condition.status == "False"
    assert "below elastic.minNodes 2" in gone.events[0].message
    waiting = run(job, [_pod(0)], previous=status, now=NOW + timedelta(seconds=30), rendezvous_stores=(_store(),))
    assert condition(waiting.status, ConditionType.RUNNING).reason == Reason.BELOW_MIN_NODES
    assert waiting.requeue_after is not None and waiting.requeue_after <= 30
    over = run(job, [_pod(0)], previous=waiting.status, now=NOW + timedelta(seconds=61),
               rendezvous_stores=(_store(),))
    assert over.status.phase == Phase.RESTARTING
    record = over.status.restart_history[-1]
    assert record.reason == Reason.BELOW_MIN_NODES and not record.counted
    assert over.status.elastic is not None and over.status.elastic.shed == [], "the next attempt is whole"


def test_a_store_once_seen_is_kept_and_its_loss_restarts_the_gang_uncounted() -> None:
    job = _job()
    running = _running(job)
    assert running.status.elastic is not None and running.status.elastic.store_uid == "store-uid-0"
    for stores in [(_store(phase="Failed"),), (), (_store(terminating=True),), (_store(uid="another"),)]:
        lost = run(job, _gang(), previous=running.status, rendezvous_stores=stores)
        assert lost.status.phase == Phase.RESTARTING, stores
        record = lost.status.restart_history[-1]
        assert record.reason == Reason.RENDEZVOUS_LOST and not record.counted
        assert lost.status.elastic is not None and lost.status.elastic.store_uid is None, "the next has its own"
        assert not [o for o in lost.objects_to_create if o["metadata"]["labels"].get(LABEL_RENDEZVOUS_STORE)]


def test_the_job_succeeds_when_the_nodes_training_succeed() -> None:
    job = _job()
    shed = _shed_one(job)
    done = run(job, [_pod(0, "Succeeded"), _pod(2, "Succeeded")], previous=shed.status,
               now=NOW + timedelta(seconds=5), rendezvous_stores=(_store(),))
    assert done.status.phase == Phase.SUCCEEDED
    assert "llama-rdzv-a0" in done.pods_to_delete
    assert done.status.current_nodes == 0


def test_goodput_counts_time_at_a_reduced_size() -> None:
    job = _job()
    shed = _shed_one(job)
    later = run(job, [_pod(0), _pod(2)], previous=shed.status, now=NOW + timedelta(seconds=61),
                rendezvous_stores=(_store(),))
    goodput = later.status.goodput
    assert goodput is not None and goodput.reduced_seconds == 61 and goodput.productive_seconds == 61


def test_what_is_shed_the_nodes_faults_with_a_node_index() -> None:
    job, status = _job(), _running(_job()).status
    node_faults = [Failure(Reason.NODE_LOST, "", node_loss=True, index=1),
                   Failure(Reason.PREEMPTED, "", node_loss=True, index=1),
                   Failure(Reason.NODE_DRAINED, "", node_loss=True, index=1),
                   Failure(Reason.NODE_UNHEALTHY, "", unhealthy_node=True, index=1),
                   Failure(Reason.STRAGGLER, "", straggler=True, index=1)]
    assert all(sheds(job, status, f) for f in node_faults)
    # The job's own failure, a failure of no one node, or any job not elastic: the failure policy's.
    assert not sheds(job, status, Failure(Reason.POD_FAILED, "", exit_code=1, index=1))
    assert not sheds(job, status, Failure(Reason.HUNG, "", node_loss=False))
    assert not sheds(_stored(3), status, node_faults[0])


def test_the_store_stays_while_the_final_sync_holds_the_job_and_goes_with_it() -> None:
    job = _stored(3, elastic={"minNodes": 2}, cache={"claimName": "c"}, checkpointing={"claimName": "k"})
    running = _running(job)
    done = [_pod(i, "Succeeded") for i in range(3)]
    held = run(job, done, previous=running.status, rendezvous_stores=(_store(),), mirror=running_mirror())
    assert held.status.phase == Phase.RUNNING, "waiting for the mirror's final sync"
    assert "llama-rdzv-a0" not in held.pods_to_delete
    # The store deleted by anyone meanwhile is no failure: training is over.
    again = run(job, done, previous=held.status, rendezvous_stores=(_store(terminating=True),),
                mirror=running_mirror(), now=NOW + timedelta(seconds=5))
    assert again.status.restarts == 0 and not again.status.restart_history


def test_a_new_pod_that_fails_is_made_again_one_window_later() -> None:
    job = _job(resizeWindowSeconds=30)
    shed = _shed_one(job)
    later = NOW + timedelta(seconds=40)
    failed = run(job, [_pod(0), _pod(1, "Failed", uid="uid-1b", exit_code=1), _pod(2)], previous=shed.status,
                 now=later, rendezvous_stores=(_store(),))
    assert "llama-1-a0" in failed.pods_to_delete and failed.status.restarts == 0
    assert failed.status.elastic is not None and len(failed.status.elastic.shed) == 1
    soon = run(job, [_pod(0), _pod(2)], previous=failed.status, now=later + timedelta(seconds=10),
               rendezvous_stores=(_store(),))
    assert len(soon.pods_to_create) == 0
    after = run(job, [_pod(0), _pod(2)], previous=soon.status, now=later + timedelta(seconds=31),
                rendezvous_stores=(_store(),))
    assert [p["metadata"]["name"] for p in after.pods_to_create] == ["llama-1-a0"]
