"""Hot spares (spares.py), through the planner: the pool is made once the gang runs and kept at spec.spareNodes;
a lost node's rank goes to a warm spare (rank 0's too, the leader moving with it) while the rest of the gang
restarts in place; a pass that has not seen the spare take it, or an operator restarted in between, gives it to
the same spare, never to a new pod; a finished or suspended job keeps none."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from multinode.api.constants import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_JOINED_IN,
    ANNOTATION_LEADER,
    ANNOTATION_NODE_INDEX,
    LABEL_SPARE,
)
from multinode.api.health_check import HealthStatus, NodeHealth
from multinode.reconcile.node_loss import NodeDown
from multinode.testing import observed_spare, stored_job
from tests.unit.reconcile.planning import NOW, pod, run

DEAD = {"dead": NodeDown("Unknown", "2026-11-20T11:58:00Z")}
LEADER = "llama-0.llama.ml.svc"


def _job(spares=1, nodes=2):
    return stored_job(nodes, spareNodes=spares, failurePolicy={"restartStrategy": "InPlace"})


def _pod(index, node, *, attempt=0, told=0, restarts=0, expected=0, phase="Running"):
    return pod(index, phase, attempt=attempt, node=node, in_place_attempt=told, trainer_restarts=restarts,
               in_place_trainer_restarts=expected, restart_rules=True, started_at="2026-11-20T11:00:00Z")


def _gang(first="n0"):
    return [_pod(0, first), _pod(1, "n1")]


def test_spares_are_made_once_the_gang_runs_beyond_num_nodes_and_counted() -> None:
    job = _job(spares=2)
    pending = run(job, [_pod(0, "n0", phase="Pending"), _pod(1, "n1", phase="Pending")])
    assert pending.spares_to_create == []

    running = run(job, _gang())
    assert running.status.phase == Phase.RUNNING
    spares = [o for o in running.spares_to_create if o["kind"] == "Pod"]
    assert [s["metadata"]["name"] for s in spares] == ["llama-s0", "llama-s1"]
    assert [s["metadata"]["labels"][LABEL_SPARE] for s in spares] == ["0", "1"]
    assert "schedulingGroup" not in spares[0]["spec"], "spares are beyond the gang's group"
    assert running.status.spares is not None and running.status.spares.wanted == 2

    # Seen (one warm, one still scheduling): counted, and no more made.
    seen = run(job, _gang(), previous=running.status,
               spares=(observed_spare(0, "n2"), observed_spare(1, None, in_preflight=False)))
    assert [o for o in seen.spares_to_create if o["kind"] == "Pod"] == []
    counts = seen.status.spares
    assert (counts.wanted, counts.warm, counts.starting, counts.taken) == (2, 1, 1, 0)


def test_a_lost_rank_0_goes_to_a_warm_spare_and_the_leader_moves_with_it() -> None:
    job = _job()
    spare = observed_spare(0, "n2")
    before = run(job, _gang("dead"), spares=(spare,)).status
    lost = run(job, _gang("dead"), previous=before, spares=(spare,), down_nodes=DEAD)

    status = lost.status
    assert (status.attempt, status.pods_attempt) == (1, 0)
    record = status.restart_history[-1]
    assert (record.reason, record.index, record.spare) == ("NodeLost", 0, 0)
    assert lost.pods_to_force_delete == ["llama-0-a0"] and list(lost.pods_to_create) == []
    took = lost.pods_to_annotate["llama-s0"]
    assert (took[ANNOTATION_NODE_INDEX], took[ANNOTATION_JOINED_IN], took[ANNOTATION_ATTEMPT]) == ("0", "1", "1")
    assert took[ANNOTATION_LEADER] == "llama-s0.llama.ml.svc"
    assert lost.pods_to_annotate["llama-1-a0"][ANNOTATION_LEADER] == "llama-s0.llama.ml.svc"
    assert [e.reason for e in lost.events if e.reason == "SpareTookRank"] == ["SpareTookRank"]
    assert status.spares is not None and status.spares.taken == 1

    # The next pass has not seen the annotations land (or the operator restarted): the same spare is told
    # again, and no pod is made for node 0.
    again = run(job, [_pod(1, "n1", told=1, expected=1)], previous=status, spares=(spare,), down_nodes=DEAD)
    assert list(again.pods_to_create) == []
    assert again.pods_to_annotate["llama-s0"][ANNOTATION_NODE_INDEX] == "0"
    assert not [e for e in again.events if e.reason == "SpareTookRank"], "the Event is posted once"

    # The spare took it: the gang runs, rank 0 on the spare; another spare is made to refill the pool.
    joined = observed_spare(0, "n2", rank=0, joined_in=1, phase="Running", in_place_attempt=1)
    back = [joined, _pod(1, "n1", told=1, restarts=1, expected=1)]
    running = run(job, back, previous=again.status, down_nodes=DEAD)
    assert (running.status.phase, running.status.attempt) == (Phase.RUNNING, 1)
    assert list(running.pods_to_create) == []
    assert [o["metadata"]["name"] for o in running.spares_to_create if o["kind"] == "Pod"] == ["llama-s1"]
    rows = {row.index: row.pod for row in running.status.node_statuses}
    assert rows == {0: "llama-s0", 1: "llama-1-a0"}

    # A later in-place attempt keeps the spare as the leader.
    later = run(job, [joined, _pod(1, "n1", told=1, restarts=2, expected=1)], previous=running.status)
    assert later.status.attempt == 2
    assert {a[ANNOTATION_LEADER] for a in later.pods_to_annotate.values()} == {"llama-s0.llama.ml.svc"}


def test_without_a_warm_spare_a_new_pod_takes_the_rank() -> None:
    job = _job()
    busy = observed_spare(0, "n0")  # on the machine of a pod that stays: not free for the rank
    cold = observed_spare(1, None, in_preflight=False)
    gang = [_pod(0, "n0"), _pod(1, "dead")]
    before = run(job, gang, spares=(busy, cold)).status
    lost = run(job, gang, previous=before, spares=(busy, cold), down_nodes=DEAD)
    assert lost.status.restart_history[-1].spare is None
    assert "llama-s0" not in lost.pods_to_annotate and "llama-s1" not in lost.pods_to_annotate
    assert lost.pods_to_annotate["llama-0-a0"][ANNOTATION_LEADER] == LEADER
    replaced = run(job, [_pod(0, "n0", told=1, expected=1)], previous=lost.status, spares=(busy, cold),
                   down_nodes=DEAD)
    assert replaced.pods_to_create.names == ["llama-1-a1"]


def test_a_spare_the_operator_gave_a_rank_but_that_vanished_is_replaced_by_a_new_pod() -> None:
    job = _job()
    spare = observed_spare(0, "n2")
    gang = [_pod(0, "n0"), _pod(1, "dead")]
    lost = run(job, gang, previous=run(job, gang, spares=(spare,)).status, spares=(spare,), down_nodes=DEAD)
    assert lost.status.restart_history[-1].spare == 0
    gone = run(job, [_pod(0, "n0", told=1, expected=1)], previous=lost.status, down_nodes=DEAD)
    assert gone.pods_to_create.names == ["llama-1-a1"]


def test_a_spare_that_failed_or_lost_its_node_is_deleted_and_replaced() -> None:
    job = _job(spares=2)
    failed = observed_spare(0, "n2", phase="Failed", in_preflight=False, reason="PreflightFailed",
                            message="GPUsNotVisible")
    stranded = observed_spare(1, "dead")
    result = run(job, _gang(), spares=(failed, stranded), down_nodes=DEAD)
    assert result.pods_to_delete == ["llama-s0"] and result.pods_to_force_delete == ["llama-s1"]
    replaced = [e.message for e in result.events if e.reason == "SpareReplaced"]
    assert len(replaced) == 2 and "GPUsNotVisible" in replaced[0] and "dead" in replaced[1]
    # New serials: the failed ones still hold theirs until they are gone.
    assert [o["metadata"]["name"] for o in result.spares_to_create if o["kind"] == "Pod"] == ["llama-s2",
                                                                                                "llama-s3"]


def test_a_finished_or_suspended_job_keeps_no_spare() -> None:
    job = _job()
    spare = observed_spare(0, "n2")
    done = [pod(0, "Succeeded", node="n0"), pod(1, "Succeeded", node="n1")]
    finished = run(job, done, spares=(spare,))
    assert finished.status.phase == Phase.SUCCEEDED
    assert "llama-s0" in finished.pods_to_delete

    suspended = stored_job(2, spareNodes=1, failurePolicy={"restartStrategy": "InPlace"}, suspend=True)
    held = run(suspended, _gang(), spares=(spare,))
    assert held.status.phase == Phase.SUSPENDED and "llama-s0" in held.pods_to_delete


def test_spare_time_counts_as_its_own_goodput_figure() -> None:
    job = _job()
    spare = observed_spare(0, "n2")
    first = run(job, _gang(), spares=(spare,))
    assert first.status.goodput is not None and first.status.goodput.spare_seconds == 0
    later = run(job, _gang(), previous=first.status, spares=(spare,), now=NOW + timedelta(seconds=90))
    assert later.status.goodput is not None
    assert later.status.goodput.spare_seconds == 90, "one warm spare for 90 s"
    assert later.status.goodput.productive_seconds == 90 and later.status.goodput.lost_seconds == 0


def test_a_spare_whose_node_failed_its_health_check_keeps_the_next_spare_off_that_node() -> None:
    job = _job()
    sick = observed_spare(0, "bad-node", phase="Failed", in_preflight=False, reason="NodeUnhealthy",
                          health=NodeHealth(status=HealthStatus.FAILED, reason="GPUsNotVisible",
                                            message="0 of 1 GPUs visible"))
    result = run(job, _gang(), spares=(sick,))
    assert [e.node for e in result.status.excluded_nodes] == ["bad-node"]
    (new,) = [o for o in result.spares_to_create if o["kind"] == "Pod"]
    terms = new["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert "bad-node" in str(terms)


def test_a_gang_recreated_after_an_abandoned_in_place_restart_does_not_keep_a_spare_as_a_rank() -> None:
    job = _job()
    joined = observed_spare(0, "n2", rank=0, joined_in=1, phase="Running", in_place_attempt=1)
    # The in-place attempt 1 was abandoned: recreated as the same attempt in new pods (podsAttempt cleared).
    status = run(job, _gang()).status.model_copy(update={"attempt": 1, "pods_attempt": None})
    recreated = run(job, [joined, pod(1, "Running", attempt=1, node="n1")], previous=status)
    assert "llama-0-a1" in recreated.pods_to_create.names, "rank 0 gets a new pod of the recreated gang"


def test_new_spares_wait_for_going_ones_rather_than_take_a_hostname_admission_did_not_check() -> None:
    job = _job()  # 2 nodes, 1 spare: serials below 2 + 2 × 1 = 4 fit the name admission checked
    going = tuple(observed_spare(s, "n9", terminating=True) for s in range(4))
    assert run(job, _gang(), spares=going).spares_to_create == []
    (new,) = run(job, _gang(), spares=going[1:]).spares_to_create
    assert new["metadata"]["name"] == "llama-s0"
