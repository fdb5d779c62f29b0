"""Elastic jobs (elastic.py), through the planner: a lost node is shed and the rest train on (not a restart);
below minNodes they wait, then the gang restarts; a shed index gets a new pod after the resize window and is
back once its trainer runs; the job succeeds when the nodes training do. (The rendezvous store:
test_rendezvous_store.py.)"""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from multinode.api.conditions import ConditionType, Reason
from multinode.reconcile.elastic import sheds
from multinode.reconcile.failures import Failure
from multinode.reconcile.node_loss import NodeDown
from multinode.testing import stored_job
from tests.unit.reconcile.elastic_jobs import elastic_job, gang, node_pod, running_plan, store_pod
from tests.unit.reconcile.planning import NOW, condition, run, running_mirror

DEAD = {"gpu-node-1": NodeDown("Unknown", "2026-11-20T11:50:00Z")}


def test_a_deleted_pod_is_shed_and_the_rest_train_on_without_a_restart() -> None:
    job = elastic_job()
    running = running_plan(job)
    gone = run(job, [node_pod(0), node_pod(1, terminating=True), node_pod(2)], previous=running.status,
               rendezvous_stores=(store_pod(),))
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
    later = run(job, [node_pod(0), node_pod(1, terminating=True), node_pod(2)], previous=status,
                now=NOW + timedelta(seconds=5), rendezvous_stores=(store_pod(),))
    assert later.status.elastic is not None and len(later.status.elastic.shed) == 1
    assert later.events == [] and later.status.restarts == 0
    assert len(later.pods_to_create) == 0 and later.requeue_after is not None and later.requeue_after <= 25


def test_a_lost_node_is_force_deleted_and_shed() -> None:
    job = elastic_job()
    running = running_plan(job)
    lost = run(job, gang(), previous=running.status, down_nodes=DEAD, rendezvous_stores=(store_pod(),))
    assert lost.status.phase == Phase.RUNNING and lost.status.restarts == 0
    assert lost.pods_to_force_delete == ["llama-1-a0"]
    assert lost.status.elastic is not None and lost.status.elastic.shed[0].reason == Reason.NODE_LOST


def test_a_trainer_that_fails_on_its_own_restarts_the_gang_as_in_any_job() -> None:
    job = elastic_job()
    running = running_plan(job)
    failed = run(job, [node_pod(0), node_pod(1, "Failed", exit_code=1, reason="Error"), node_pod(2)],
                 previous=running.status, rendezvous_stores=(store_pod(),))
    assert failed.status.phase == Phase.RESTARTING and failed.status.restarts == 1
    assert not failed.status.elastic or not failed.status.elastic.shed


def _shed_one(job):
    running = running_plan(job)
    return run(job, [node_pod(0), node_pod(1, terminating=True), node_pod(2)], previous=running.status,
               rendezvous_stores=(store_pod(),))


def test_after_the_window_the_shed_index_gets_a_new_pod_and_is_back_once_it_runs() -> None:
    job = elastic_job(resizeWindowSeconds=30)
    shed = _shed_one(job)
    after = NOW + timedelta(seconds=31)
    made = run(job, [node_pod(0), node_pod(2)], previous=shed.status, now=after, rendezvous_stores=(store_pod(),))
    assert [p["metadata"]["name"] for p in made.pods_to_create] == ["llama-1-a0"]
    assert made.status.phase == Phase.RUNNING and made.status.restarts == 0
    # Pending (no machine yet): still shed, still training on 2; no startup timeout for it.
    pending = run(job, [node_pod(0), node_pod(1, "Pending", uid="uid-1b", node=None), node_pod(2)],
                  previous=made.status, now=after + timedelta(hours=2), rendezvous_stores=(store_pod(),))
    assert pending.status.phase == Phase.RUNNING and pending.status.restarts == 0
    assert pending.status.elastic is not None and len(pending.status.elastic.shed) == 1
    # Its trainer runs: back, an Event, full size.
    back = run(job, [node_pod(0), node_pod(1, uid="uid-1b"), node_pod(2)], previous=pending.status,
               now=after + timedelta(hours=2, seconds=5), rendezvous_stores=(store_pod(),))
    assert back.status.elastic is not None and back.status.elastic.shed == []
    assert back.status.elastic.resizes == 2 and back.status.current_nodes == 3
    assert [e.reason for e in back.events] == [Reason.ELASTIC_GREW]
    assert "grows to 3 of 3" in back.events[0].message
    assert condition(back.status, ConditionType.RUNNING).reason == Reason.ALL_NODES_RUNNING


def test_below_min_waits_then_the_gang_restarts_uncounted() -> None:
    job = elastic_job(nodes=2, minimum=2, belowMinTimeoutSeconds=60)
    running = running_plan(job, n=2)
    gone = run(job, [node_pod(0), node_pod(1, terminating=True)], previous=running.status,
               rendezvous_stores=(store_pod(),))
    status = gone.status
    assert status.phase == Phase.RUNNING and status.restarts == 0
    running_condition = condition(status, ConditionType.RUNNING)
    assert running_condition.reason == Reason.BELOW_MIN_NODES and running_condition.status == "False"
    assert "below elastic.minNodes 2" in gone.events[0].message
    waiting = run(job, [node_pod(0)], previous=status, now=NOW + timedelta(seconds=30),
                  rendezvous_stores=(store_pod(),))
    assert condition(waiting.status, ConditionType.RUNNING).reason == Reason.BELOW_MIN_NODES
    assert waiting.requeue_after is not None and waiting.requeue_after <= 30
    over = run(job, [node_pod(0)], previous=waiting.status, now=NOW + timedelta(seconds=61),
               rendezvous_stores=(store_pod(),))
    assert over.status.phase == Phase.RESTARTING
    record = over.status.restart_history[-1]
    assert record.reason == Reason.BELOW_MIN_NODES and not record.counted
    assert over.status.elastic is not None and over.status.elastic.shed == [], "the next attempt is whole"


def test_the_job_succeeds_when_the_nodes_training_succeed() -> None:
    job = elastic_job()
    shed = _shed_one(job)
    done = run(job, [node_pod(0, "Succeeded"), node_pod(2, "Succeeded")], previous=shed.status,
               now=NOW + timedelta(seconds=5), rendezvous_stores=(store_pod(),))
    assert done.status.phase == Phase.SUCCEEDED
    assert "llama-rdzv-a0" in done.pods_to_delete
    assert done.status.current_nodes == 0


def test_goodput_counts_time_at_a_reduced_size() -> None:
    job = elastic_job()
    shed = _shed_one(job)
    later = run(job, [node_pod(0), node_pod(2)], previous=shed.status, now=NOW + timedelta(seconds=61),
                rendezvous_stores=(store_pod(),))
    goodput = later.status.goodput
    assert goodput is not None and goodput.reduced_seconds == 61 and goodput.productive_seconds == 61


def test_what_is_shed_the_nodes_faults_with_a_node_index() -> None:
    job, status = elastic_job(), running_plan(elastic_job()).status
    node_faults = [Failure(Reason.NODE_LOST, "", node_loss=True, index=1),
                   Failure(Reason.PREEMPTED, "", node_loss=True, index=1),
                   Failure(Reason.NODE_DRAINED, "", node_loss=True, index=1),
                   Failure(Reason.NODE_UNHEALTHY, "", unhealthy_node=True, index=1),
                   Failure(Reason.STRAGGLER, "", straggler=True, index=1)]
    assert all(sheds(job, status, f) for f in node_faults)
    # The job's own failure, a failure of no one node, or any job not elastic: the failure policy's.
    assert not sheds(job, status, Failure(Reason.POD_FAILED, "", exit_code=1, index=1))
    assert not sheds(job, status, Failure(Reason.HUNG, "", node_loss=False))
    assert not sheds(stored_job(3), status, node_faults[0])


def test_the_store_stays_while_the_final_sync_holds_the_job_and_goes_with_it() -> None:
    job = stored_job(3, elastic={"minNodes": 2}, cache={"claimName": "c"}, checkpointing={"claimName": "k"})
    running = running_plan(job)
    done = [node_pod(i, "Succeeded") for i in range(3)]
    held = run(job, done, previous=running.status, rendezvous_stores=(store_pod(),), mirror=running_mirror())
    assert held.status.phase == Phase.RUNNING, "waiting for the mirror's final sync"
    assert "llama-rdzv-a0" not in held.pods_to_delete
    # The store deleted by anyone meanwhile is no failure: training is over.
    again = run(job, done, previous=held.status, rendezvous_stores=(store_pod(terminating=True),),
                mirror=running_mirror(), now=NOW + timedelta(seconds=5))
    assert again.status.restarts == 0 and not again.status.restart_history


def test_a_new_pod_that_fails_is_made_again_one_window_later() -> None:
    job = elastic_job(resizeWindowSeconds=30)
    shed = _shed_one(job)
    later = NOW + timedelta(seconds=40)
    failed = run(job, [node_pod(0), node_pod(1, "Failed", uid="uid-1b", exit_code=1), node_pod(2)],
                 previous=shed.status, now=later, rendezvous_stores=(store_pod(),))
    assert "llama-1-a0" in failed.pods_to_delete and failed.status.restarts == 0
    assert failed.status.elastic is not None and len(failed.status.elastic.shed) == 1
    soon = run(job, [node_pod(0), node_pod(2)], previous=failed.status, now=later + timedelta(seconds=10),
               rendezvous_stores=(store_pod(),))
    assert len(soon.pods_to_create) == 0
    after = run(job, [node_pod(0), node_pod(2)], previous=soon.status, now=later + timedelta(seconds=31),
                rendezvous_stores=(store_pod(),))
    assert [p["metadata"]["name"] for p in after.pods_to_create] == ["llama-1-a0"]


def test_a_shed_index_new_pod_joins_no_pod_group_and_keeps_to_the_gangs_domain() -> None:
    from tests.unit.reconcile.test_gang import group
    from tests.unit.reconcile.test_placement import nodes

    job = stored_job(3, elastic={"minNodes": 2, "resizeWindowSeconds": 30}, resourcesPerNode={"gpus": 8},
                     topology={"sameDomainLabel": "block"})
    cluster = nodes({"block-0": 3, "block-1": 4})
    seen = {"gang_api": True, "nodes": cluster, "rendezvous_stores": (store_pod(),)}
    first = run(job, [], **seen, pod_groups=(group(topology_keys=("block",)),))
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in first.pods_to_create} == {"llama-a0"}
    placed = {"pod_groups": (group(scheduled="True", topology_keys=("block",)),), **seen}
    pods = [node_pod(i, node=f"block-1-{i}", pod_group="llama-a0") for i in range(3)]
    running = run(job, pods, previous=first.status, **placed)
    assert running.status.topology_domain == "block-1"
    shed = run(job, [pods[0], node_pod(1, node="block-1-1", terminating=True), pods[2]], previous=running.status,
               **placed)
    made = run(job, [pods[0], pods[2]], previous=shed.status, now=NOW + timedelta(seconds=31), **placed)

    [new] = made.pods_to_create
    # The gang is placed (its minCount bound): the new pod is scheduled on its own, in the gang's domain. In
    # the group, 1.36's scheduler would retry it without pause for as long as no machine is free.
    assert new["metadata"]["name"] == "llama-1-a0" and "schedulingGroup" not in new["spec"]
    assert new["spec"]["nodeSelector"]["block"] == "block-1"


def test_without_topology_a_shed_index_new_pod_joins_no_pod_group_and_has_no_domain() -> None:
    from tests.unit.reconcile.test_gang import group

    job = elastic_job(resizeWindowSeconds=30)
    seen = {"gang_api": True, "rendezvous_stores": (store_pod(),), "pod_groups": (group(scheduled="True"),)}
    first = run(job, [], **seen)
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in first.pods_to_create} == {"llama-a0"}
    pods = [node_pod(i, pod_group="llama-a0") for i in range(3)]
    running = run(job, pods, previous=first.status, **seen)
    shed = run(job, [pods[0], node_pod(1, terminating=True), pods[2]], previous=running.status, **seen)
    made = run(job, [pods[0], pods[2]], previous=shed.status, now=NOW + timedelta(seconds=31), **seen)

    [new] = made.pods_to_create
    assert "schedulingGroup" not in new["spec"] and "block" not in new["spec"].get("nodeSelector", {})


def test_with_volcano_a_shed_index_new_pod_keeps_its_scheduler_and_group() -> None:
    job = stored_job(3, elastic={"minNodes": 2, "resizeWindowSeconds": 30}, scheduling={"volcano": {}})
    seen = {"rendezvous_stores": (store_pod(),)}
    running = running_plan(job)
    shed = run(job, [node_pod(0), node_pod(1, terminating=True), node_pod(2)], previous=running.status, **seen)
    made = run(job, [node_pod(0), node_pod(2)], previous=shed.status, now=NOW + timedelta(seconds=31), **seen)

    [new] = made.pods_to_create
    assert new["spec"]["schedulerName"] == "volcano"
    assert new["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "llama-a0"
