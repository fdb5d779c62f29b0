"""In-place gang restarts (in_place.py), through the planner: a trainer restarted in place declares the next
attempt into the same pods; a second failure is a new attempt; an operator restart carries on; the gang is
recreated when a pod is gone or the pods do not come back in time."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from multinode.api.health_check import HealthStatus, NodeHealth
from multinode.api.constants import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_LEADER,
    ANNOTATION_RENDEZVOUS_ID,
    ANNOTATION_RENDEZVOUS_PORT,
    ANNOTATION_RESUME_FROM,
    ANNOTATION_TRAINER_RESTARTS,
)
from multinode.reconcile.in_place import IN_PLACE_TIMEOUT_SECONDS
from multinode.reconcile.node_loss import NodeDown
from multinode.render import attempt_env_name
from multinode.render.env import rendezvous_id, rendezvous_port
from multinode.testing import checkpointed_job, stored_job
from tests.unit.reconcile.planning import LATEST, NOW, pod, run

IN_PLACE = {"restartStrategy": "InPlace"}
BAD = NodeHealth(status=HealthStatus.FAILED, reason="GPUsNotVisible", message="8 GPUs requested, fewer visible: 7")


def _job(**policy):
    return stored_job(2, failurePolicy={**IN_PLACE, **policy})


def _pod(index, *, told=0, restarts=0, expected=0, phase="Running", attempt=0, **fields):
    """A pod of `attempt` whose annotations name attempt `told` and `expected` trainer restarts."""
    fields.setdefault("restart_rules", True)
    return pod(index, phase, attempt=attempt, in_place_attempt=told, trainer_restarts=restarts,
               in_place_trainer_restarts=expected, started_at="2026-11-20T11:00:00Z", **fields)


def _rendezvous(job, attempt):
    """The rendezvous annotations of `attempt`, node 0 leading."""
    return {ANNOTATION_LEADER: "llama-0.llama.ml.svc",
            ANNOTATION_RENDEZVOUS_PORT: str(rendezvous_port(job.spec.network.rendezvous_port, attempt)),
            ANNOTATION_RENDEZVOUS_ID: rendezvous_id(job.metadata.uid, attempt)}


def _running(job, pods):
    result = run(job, pods)
    assert result.status.phase == Phase.RUNNING, result.status
    return result.status


def test_a_trainer_restarted_in_place_declares_the_next_attempt_into_the_same_pods() -> None:
    job = _job()
    before = _running(job, [_pod(0), _pod(1)])
    result = run(job, [_pod(0), _pod(1, restarts=1, phase="Pending")], previous=before)

    status = result.status
    assert (status.attempt, status.pods_attempt, status.restarts, status.phase) == (1, 0, 1, Phase.RESTARTING)
    record = status.restart_history[-1]
    assert record.reason == "PodFailed" and "restarted in place" in record.message
    assert status.next_attempt_time is None, "no backoff: the kubelet restarted the pod already"
    assert result.pods_to_delete == [] and list(result.pods_to_create) == []
    rendezvous = _rendezvous(job, 1)
    assert result.pods_to_annotate == {
        "llama-0-a0": {ANNOTATION_ATTEMPT: "1", ANNOTATION_RESUME_FROM: "", "multinode.dev/restart-count": "1",
                       ANNOTATION_TRAINER_RESTARTS: "1", **rendezvous},  # still running attempt 0: restarts once more
        "llama-1-a0": {ANNOTATION_ATTEMPT: "1", ANNOTATION_RESUME_FROM: "", "multinode.dev/restart-count": "1",
                       ANNOTATION_TRAINER_RESTARTS: "1", **rendezvous},  # restarted already
    }
    # A new rendezvous (port and id) per attempt: a pod cut off from an earlier one never rejoins it.
    assert rendezvous != _rendezvous(job, 0) and rendezvous[ANNOTATION_LEADER] == "llama-0.llama.ml.svc"
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "Restarting")]
    assert "in place" in result.events[0].message


def test_the_new_attempt_resumes_from_the_latest_mirrored_checkpoint() -> None:
    job = checkpointed_job({"latest": LATEST}, claimName="ckpt")
    job.spec.failure_policy.restart_strategy = "InPlace"
    before = _running(job, [_pod(0), _pod(1)])
    result = run(job, [_pod(0), _pod(1, restarts=1)], previous=before)
    assert result.status.resumed_from == LATEST["path"]
    assert {a[ANNOTATION_RESUME_FROM] for a in result.pods_to_annotate.values()} == {LATEST["path"]}


def test_the_gang_is_restarting_until_every_pod_restarted_into_the_attempt_then_runs() -> None:
    job = _job()
    declared = run(job, [_pod(0), _pod(1, restarts=1)], previous=_running(job, [_pod(0), _pod(1)])).status
    told = [_pod(0, told=1, expected=1), _pod(1, told=1, restarts=1, expected=1)]
    waiting = run(job, told, previous=declared)
    assert (waiting.status.phase, waiting.status.attempt) == (Phase.RESTARTING, 1)
    running_cond = next(c for c in waiting.status.conditions if c.type == "Running")
    assert running_cond.status == "False"
    assert waiting.pods_to_annotate == {} and waiting.requeue_after is not None

    back = [_pod(0, told=1, restarts=1, expected=1), _pod(1, told=1, restarts=1, expected=1)]
    result = run(job, back, previous=waiting.status)
    assert (result.status.phase, result.status.attempt, result.status.restarts) == (Phase.RUNNING, 1, 1)


def test_a_peer_restarting_as_the_gang_follows_is_not_a_new_failure_but_a_second_restart_is() -> None:
    job = _job()
    declared = run(job, [_pod(0), _pod(1, restarts=1)], previous=_running(job, [_pod(0), _pod(1)])).status
    followed = run(job, [_pod(0, told=1, restarts=1, expected=1), _pod(1, told=1, restarts=1, expected=1)],
                   previous=declared)
    assert followed.status.attempt == 1

    again = run(job, [_pod(0, told=1, restarts=1, expected=1), _pod(1, told=1, restarts=2, expected=1)],
                previous=followed.status)
    assert (again.status.attempt, again.status.restarts, again.status.pods_attempt) == (2, 2, 0)
    assert again.pods_to_annotate["llama-1-a0"][ANNOTATION_TRAINER_RESTARTS] == "2"
    assert again.pods_to_annotate["llama-0-a0"][ANNOTATION_TRAINER_RESTARTS] == "2"


def test_pods_not_told_the_attempt_are_told_by_the_next_pass_after_an_operator_restart() -> None:
    job = _job()
    declared = run(job, [_pod(0), _pod(1, restarts=1)], previous=_running(job, [_pod(0), _pod(1)])).status
    # The annotation of pod 1 landed, pod 0's did not (the operator stopped in between); pod 0 restarted since.
    result = run(job, [_pod(0, restarts=1), _pod(1, told=1, restarts=1, expected=1)], previous=declared)
    assert result.status.attempt == 1, "no new attempt: pod 0 restarted for attempt 1"
    assert result.pods_to_annotate == {"llama-0-a0": {ANNOTATION_ATTEMPT: "1", ANNOTATION_RESUME_FROM: "",
                                                      "multinode.dev/restart-count": "1",
                                                      ANNOTATION_TRAINER_RESTARTS: "1", **_rendezvous(job, 1)}}


def test_pods_that_do_not_come_back_in_time_are_recreated_as_the_same_attempt() -> None:
    job = _job()
    declared = run(job, [_pod(0), _pod(1, restarts=1)], previous=_running(job, [_pod(0), _pod(1)])).status
    hung = [_pod(0, told=1, expected=1), _pod(1, told=1, restarts=1, expected=1)]  # pod 0's trainer never exits
    later = NOW + timedelta(seconds=IN_PLACE_TIMEOUT_SECONDS + 1)
    result = run(job, hung, previous=declared, now=later)

    assert result.status.pods_attempt is None and result.status.attempt == 1 and result.status.restarts == 1
    assert sorted(result.pods_to_delete) == ["llama-0-a0", "llama-1-a0"]
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "InPlaceRestartAbandoned")]
    assert "llama-0-a0" in result.events[0].message
    # BlockingRecreate's wait: the new pods come once the old are gone.
    gone = run(job, [], previous=result.status, now=later)
    assert sorted(gone.pods_to_create.names) == ["llama-0-a1", "llama-1-a1"]


def test_a_pod_that_succeeds_instead_of_restarting_recreates_the_gang_at_once() -> None:
    job = _job()
    declared = run(job, [_pod(0), _pod(1, restarts=1)], previous=_running(job, [_pod(0), _pod(1)])).status
    done = [_pod(0, told=1, expected=1, phase="Succeeded"), _pod(1, told=1, restarts=1, expected=1)]
    result = run(job, done, previous=declared)  # no wait for IN_PLACE_TIMEOUT_SECONDS: it will never restart
    assert result.status.pods_attempt is None and result.status.attempt == 1
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "InPlaceRestartAbandoned")]
    assert "llama-0-a0 finished (Succeeded)" in result.events[0].message
    assert result.pods_to_delete == ["llama-1-a0"], "the finished pod is not active: nothing to delete"


def test_a_pod_deleted_from_an_in_place_gang_is_a_lost_node_and_only_it_is_replaced() -> None:
    job = _job()
    declared = run(job, [_pod(0), _pod(1, restarts=1)], previous=_running(job, [_pod(0), _pod(1)])).status
    result = run(job, [_pod(1, told=1, restarts=1, expected=1)], previous=declared)
    status = result.status
    assert (status.attempt, status.pods_attempt, status.uncounted_restarts) == (2, 0, 1)
    assert (status.restart_history[-1].reason, status.restart_history[-1].index) == ("NodeLost", 0)
    assert result.pods_to_delete == [] and set(result.pods_to_annotate) == {"llama-1-a0"}
    assert run(job, [_pod(1, told=2, restarts=1, expected=2)], previous=status).pods_to_create.names == [
        "llama-0-a2"]


def test_an_unhealthy_nodes_pod_is_replaced_once_though_its_row_stays_to_say_why() -> None:
    """The failed health check's row (the old pod, its verdict) outlives the pod, as in any restart: it must
    not read as that node's pod lost again once the old pod goes (a full run saw 100 NodeLost attempts)."""
    job = stored_job(3, failurePolicy=IN_PLACE)
    started = run(job, [_pod(0, phase="Pending", node="sick"), _pod(1, node="n1"), _pod(2, node="n2")]).status
    failed = _pod(0, phase="Failed", node="sick", health=BAD, exit_code=1, reason="NodeUnhealthy")
    unhealthy = run(job, [failed, _pod(1, node="n1"), _pod(2, node="n2")], previous=started).status
    assert (unhealthy.attempt, unhealthy.pods_attempt, unhealthy.restart_history[-1].reason) == (1, 0, "NodeUnhealthy")
    assert [e.node for e in unhealthy.excluded_nodes] == ["sick"]
    gone = run(job, [_pod(1, node="n1", told=1, expected=1), _pod(2, node="n2", told=1, expected=1)],
               previous=unhealthy)
    assert gone.status.attempt == 1 and len(gone.status.restart_history) == 1, gone.status.restart_history
    assert gone.pods_to_create.names == ["llama-0-a1"]
    assert gone.status.node_statuses[0].health == BAD, "the row still says why"


def test_a_recreated_gang_goes_on_as_the_next_attempt_when_a_pod_was_made_for_this_one() -> None:
    """The replacement bears the attempt's name but reads the earlier attempt's ConfigMap, which goes with the
    recreate: kept, it never starts (a full run saw CreateContainerConfigError until the test's timeout)."""
    job = stored_job(3, failurePolicy=IN_PLACE)
    started = run(job, [_pod(0, phase="Pending", node="n0"), _pod(1, node="n1"), _pod(2, node="sick")]).status
    failed = _pod(2, phase="Failed", node="sick", health=BAD, exit_code=1, reason="NodeUnhealthy")
    unhealthy = run(job, [_pod(0, node="n0"), _pod(1, node="n1"), failed], previous=started).status
    replacement = _pod(2, attempt=1, told=1, phase="Pending", node="n3")
    # The others' trainers exit 0 instead of restarting into attempt 1.
    done = [_pod(0, told=1, expected=1, phase="Succeeded", node="n0"),
            _pod(1, told=1, expected=1, phase="Succeeded", node="n1")]
    abandoned = run(job, [*done, replacement], previous=unhealthy)
    status = abandoned.status
    assert (status.attempt, status.pods_attempt, status.restarts, status.uncounted_restarts) == (2, None, 0, 2)
    record = status.restart_history[-1]
    assert (record.attempt, record.reason, record.counted, record.index) == (1, "InPlaceRestartAbandoned", False, 2)
    assert abandoned.pods_to_delete == ["llama-2-a1"]
    assert abandoned.pods_to_create == [], "BlockingRecreate: the new gang waits for the replacement to go"
    gone = run(job, done, previous=status)
    assert sorted(gone.pods_to_create.names) == ["llama-0-a2", "llama-1-a2", "llama-2-a2"]
    made = next(p for p in gone.pods_to_create if p["metadata"]["name"] == "llama-2-a2")
    assert made["spec"]["containers"][0]["envFrom"] == [{"configMapRef": {"name": attempt_env_name(job, 2)}}]


def test_a_gang_whose_other_pods_finished_is_recreated_not_restarted_in_place() -> None:
    """A trainer that exited 0 never restarts again: replacing only the unhealthy node's pod would leave the
    gang waiting for it, so the whole gang is recreated, as BlockingRecreate does."""
    job = stored_job(3, failurePolicy=IN_PLACE)
    started = run(job, [_pod(0, phase="Pending", node="sick"), _pod(1, node="n1"), _pod(2, node="n2")]).status
    failed = _pod(0, phase="Failed", node="sick", health=BAD, exit_code=1, reason="NodeUnhealthy")
    done = [_pod(1, phase="Succeeded", node="n1"), _pod(2, phase="Succeeded", node="n2")]
    result = run(job, [failed, *done], previous=started)
    assert (result.status.attempt, result.status.pods_attempt, result.status.phase) == (1, None, Phase.RESTARTING)
    running = next(c for c in result.status.conditions if c.type == "Running")
    assert "replaced on another node" not in running.message and "NodeUnhealthy" == running.reason


def test_a_pod_missing_without_a_trace_is_made_again_into_the_gang() -> None:
    job = _job()
    declared = run(job, [_pod(0), _pod(1, restarts=1)], previous=_running(job, [_pod(0), _pod(1)])).status
    unknown = declared.model_copy(update={"node_statuses": []})  # no row says pod 0 was seen
    result = run(job, [_pod(1, told=1, restarts=1, expected=1)], previous=unknown)
    assert result.status.pods_attempt == 0 and result.pods_to_create.names == ["llama-0-a1"]


def test_a_code_a_rule_names_fails_the_pod_and_the_rule_decides() -> None:
    job = _job(rules=[{"action": "FailJob", "onExitCodes": [{"min": 2, "max": 2}]}])
    before = _running(job, [_pod(0), _pod(1)])
    result = run(job, [_pod(0), _pod(1, phase="Failed", exit_code=2, reason="Error")], previous=before)
    assert result.status.phase == Phase.FAILED
    assert any("rules[0]: FailJob" in c.message for c in result.status.conditions), result.status.conditions


def test_no_restarts_left_fails_the_job_in_place_as_elsewhere() -> None:
    job = _job(maxRestarts=0)
    before = _running(job, [_pod(0), _pod(1)])
    result = run(job, [_pod(0), _pod(1, restarts=1)], previous=before)
    assert result.status.phase == Phase.FAILED
    assert sorted(result.pods_to_delete) == ["llama-0-a0", "llama-1-a0"]


def test_pods_without_the_restart_rule_ignore_restart_counts() -> None:
    job = stored_job(2)
    before = _running(job, [pod(0), pod(1)])
    result = run(job, [pod(0), pod(1, trainer_restarts=3)], previous=before)
    assert result.status.attempt == 0 and result.status.phase == Phase.RUNNING


def test_a_job_switched_away_from_in_place_still_restarts_its_in_place_pods_in_place() -> None:
    job = _job()
    before = _running(job, [_pod(0), _pod(1)])
    job.spec.failure_policy.restart_strategy = "BlockingRecreate"  # failurePolicy may change while the job runs
    result = run(job, [_pod(0), _pod(1, restarts=1)], previous=before)
    assert (result.status.attempt, result.status.pods_attempt) == (1, 0)
    assert set(result.pods_to_annotate) == {"llama-0-a0", "llama-1-a0"}, "their barrier waits for it"


def test_the_condition_says_whether_the_cluster_kept_the_restart_rules() -> None:
    job = _job()
    kept = run(job, [_pod(0), _pod(1)]).status
    assert [(c.status, c.reason) for c in kept.conditions if c.type == "InPlaceRestarts"] == [
        ("True", "RestartRulesKept")]
    dropped = run(job, [_pod(0, restart_rules=False), _pod(1, restart_rules=False)]).status
    (condition,) = [c for c in dropped.conditions if c.type == "InPlaceRestarts"]
    assert (condition.status, condition.reason) == ("False", "RestartRulesDropped")
    assert "2 of 2 pods" in condition.message and "recreates the gang" in condition.message
    recreating = stored_job(2, failurePolicy={"restartStrategy": "BlockingRecreate"})
    assert not [c for c in run(recreating, [pod(0), pod(1)]).status.conditions if c.type == "InPlaceRestarts"]


DEAD = {"dead": NodeDown("Unknown", "2026-11-20T11:58:00Z")}


def test_a_lost_nodes_pod_is_replaced_elsewhere_while_the_others_restart_in_place() -> None:
    job = _job()
    before = _running(job, [_pod(0, node="n0"), _pod(1, node="dead")])
    lost = run(job, [_pod(0, node="n0"), _pod(1, node="dead")], previous=before, down_nodes=DEAD)

    status = lost.status
    assert (status.attempt, status.pods_attempt, status.restarts, status.uncounted_restarts) == (1, 0, 0, 1)
    record = status.restart_history[-1]
    assert (record.reason, record.index, record.counted) == ("NodeLost", 1, False)
    assert lost.pods_to_force_delete == ["llama-1-a0"] and lost.pods_to_delete == []
    assert set(lost.pods_to_annotate) == {"llama-0-a0"}, "only the pod that stays is told the attempt"
    assert list(lost.pods_to_create) == []

    # The lost pod gone: its replacement, of attempt 1, joins the gang's attempt-0 ConfigMap and stays off
    # the nodes of the pods made for attempt 0 too.
    told = _pod(0, node="n0", told=1, expected=1)
    replaced = run(job, [told], previous=lost.status, down_nodes=DEAD)
    assert replaced.pods_to_create.names == ["llama-1-a1"]
    (new,) = list(replaced.pods_to_create)
    assert new["metadata"]["annotations"]["multinode.dev/attempt"] == "1"
    container = new["spec"]["containers"][0]
    assert container["envFrom"] == [{"configMapRef": {"name": attempt_env_name(job, 0)}}]
    terms = new["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms[-1]["labelSelector"]["matchExpressions"] == [
        {"key": "multinode.dev/attempt", "operator": "In", "values": ["0", "1"]}]
    assert "schedulingGroup" not in new["spec"], "the rest of the gang is placed: no gang group for one pod"
    assert replaced.attempt_env is None and replaced.stale_attempt_env is None
    assert replaced.status.phase == Phase.RESTARTING

    # Both back: the gang runs attempt 1 in pods of attempts 0 and 1.
    back = [_pod(0, node="n0", told=1, restarts=1, expected=1),
            _pod(1, node="n2", attempt=1, told=1)]
    running = run(job, back, previous=replaced.status)
    assert (running.status.phase, running.status.attempt) == (Phase.RUNNING, 1)
    assert running.pods_to_create == [] and running.pods_to_delete == []
    # A later failure of the replacement is a new in-place attempt like any other.
    again = run(job, [back[0], _pod(1, node="n2", attempt=1, told=1, restarts=1)], previous=running.status)
    assert (again.status.attempt, again.status.pods_attempt) == (2, 0)
    assert set(again.pods_to_annotate) == {"llama-0-a0", "llama-1-a1"}


def test_a_replaced_pod_that_vanishes_is_a_lost_node_again() -> None:
    job = _job()
    before = _running(job, [_pod(0, node="n0"), _pod(1, node="dead")])
    lost = run(job, [_pod(0, node="n0"), _pod(1, node="dead")], previous=before, down_nodes=DEAD)
    back = [_pod(0, node="n0", told=1, restarts=1, expected=1), _pod(1, node="n2", attempt=1, told=1)]
    running = run(job, back, previous=run(job, back, previous=lost.status).status)
    gone = run(job, back[:1], previous=running.status)
    assert gone.status.attempt == 2 and gone.status.restart_history[-1].reason == "NodeLost"


def test_a_node_lost_while_its_peers_restarted_in_place_takes_back_the_restart_they_counted() -> None:
    job = _job()
    gang = [_pod(0, node="dead"), _pod(1, node="n1")]
    before = _running(job, gang)
    # Rank 1's collectives fail first (its peer's node is dying): a counted in-place restart.
    declared = run(job, [gang[0], _pod(1, node="n1", restarts=1)], previous=before).status
    assert (declared.attempt, declared.restarts) == (1, 1)
    # Rank 0's pod never restarts into attempt 1: its node is lost. That restart was the node's loss too.
    told = [_pod(0, node="dead", told=1, expected=1), _pod(1, node="n1", told=1, restarts=1, expected=1)]
    lost = run(job, told, previous=declared, down_nodes={"dead": NodeDown("Unknown", "2026-11-20T11:58:00Z")})
    status = lost.status
    assert (status.attempt, status.restarts, status.uncounted_restarts) == (2, 0, 2)
    forgiven, node_lost = status.restart_history[-2:]
    assert (forgiven.reason, forgiven.counted) == ("PodFailed", False)
    assert "never restarted into attempt 1, and its node was lost" in forgiven.message
    assert (node_lost.reason, node_lost.index, node_lost.counted) == ("NodeLost", 0, False)

    # A node lost after its pod came back into the attempt forgives nothing.
    back = [_pod(0, node="dead", told=1, restarts=1, expected=1), _pod(1, node="n1", told=1, restarts=1, expected=1)]
    running = run(job, back, previous=declared)
    later = run(job, back, previous=running.status,
                down_nodes={"dead": NodeDown("Unknown", "2026-11-20T11:58:00Z")})
    assert (later.status.restarts, later.status.restart_history[-2].counted) == (1, True)
