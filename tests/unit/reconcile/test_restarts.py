"""Gang restarts (restarts.py): counted or not, budget, backoff, blocking recreate."""

from __future__ import annotations

from datetime import timedelta

import pytest

from multinode.api import Phase, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.timestamps import rfc3339
from multinode.reconcile.decision import Decision
from multinode.reconcile.failures import Failure
from multinode.reconcile.restarts import apply_failure_policy, backoff_seconds, wait_for_next_attempt
from multinode.render import attempt_env_name
from tests.unit.reconcile.planning import NOW, condition, fail_node_1, pod, run
from multinode.testing import stored_job


def test_a_retryable_failure_restarts_the_whole_gang_counted_with_backoff() -> None:
    restarting = fail_node_1(stored_job(2))

    s = restarting.status
    assert (s.phase, s.attempt, s.restarts, s.uncounted_restarts) == (Phase.RESTARTING, 1, 1, 0)
    assert restarting.pods_to_delete == ["llama-0-a0"], "the healthy node goes too"
    assert restarting.pods_to_create == []
    assert s.next_attempt_time == "2026-11-20T12:00:05Z" and restarting.requeue_after == 5.0
    record = s.restart_history[-1]
    assert (record.attempt, record.reason, record.counted) == (0, "PodFailed", True)
    [event] = restarting.events
    assert (event.type, event.reason) == ("Warning", "Restarting")
    assert "restart 1/3" in event.message and "attempt 1 in 5s" in event.message


def test_blocking_recreate_waits_for_old_pods_then_for_the_backoff() -> None:
    job = stored_job(2)
    restarting = fail_node_1(job)
    old = [pod(0, terminating=True), pod(1, "Failed", exit_code=1)]

    waiting = run(job, old, previous=restarting.status, now=NOW + timedelta(seconds=10))
    assert waiting.pods_to_create == []
    assert condition(waiting.status, "Running").reason == "WaitingForOldPods"

    backoff = run(job, [pod(1, "Failed", exit_code=1)], previous=restarting.status, now=NOW + timedelta(seconds=2))
    assert backoff.pods_to_create == [] and backoff.requeue_after == 3.0
    assert condition(backoff.status, "Running").reason == "Backoff"

    next_attempt = run(job, [pod(1, "Failed", exit_code=1)], previous=restarting.status, now=NOW + timedelta(seconds=6))
    assert [p["metadata"]["name"] for p in next_attempt.pods_to_create] == ["llama-0-a1", "llama-1-a1"]
    # The attempt's shared env (its ConfigMap, read by every new pod) counts the restart; the previous
    # attempt's goes.
    shared = next_attempt.attempt_env
    assert shared is not None and shared["data"]["MULTINODE_RESTART_COUNT"] == shared["data"]["BT_RETRY_COUNT"] == "1"
    assert {p["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"]
            for p in next_attempt.pods_to_create} == {shared["metadata"]["name"]}
    assert next_attempt.stale_attempt_env == attempt_env_name(job, 0)
    assert {p["metadata"]["labels"]["multinode.dev/attempt"] for p in next_attempt.pods_to_create} == {"1"}
    assert next_attempt.status.phase == Phase.PENDING


def test_recreate_does_not_wait_for_old_pods() -> None:
    job = stored_job(2, failurePolicy={"restartStrategy": "Recreate", "backoff": {"initialSeconds": 0}})
    restarting = fail_node_1(job)

    again = run(job, [pod(0, terminating=True)], previous=restarting.status)

    assert len(again.pods_to_create) == 2


def test_backoff_doubles_and_is_capped() -> None:
    job = stored_job(2, failurePolicy={"maxRestarts": 10, "backoff": {"initialSeconds": 10, "maxSeconds": 25}})
    status = None
    delays = []
    for attempt in range(4):
        running = run(job, [pod(0, attempt=attempt), pod(1, attempt=attempt)], previous=status)
        failed = run(job, [pod(0, attempt=attempt), pod(1, "Failed", attempt=attempt, exit_code=1)],
                     previous=running.status)
        delays.append(failed.requeue_after)
        status = failed.status
        status.next_attempt_time = None  # pretend the backoff passed
    assert delays == [10.0, 20.0, 25.0, 25.0]


def test_a_spent_budget_fails_the_job_naming_the_last_failure() -> None:
    job = stored_job(2, failurePolicy={"maxRestarts": 1, "backoff": {"initialSeconds": 0}})
    first = fail_node_1(job)
    second_running = run(job, [pod(0, attempt=1), pod(1, attempt=1)], previous=first.status)
    failed = run(job, [pod(0, attempt=1, exit_code=None), pod(1, "Failed", attempt=1, exit_code=2, reason="Error")],
                 previous=second_running.status)

    assert failed.status.phase == Phase.FAILED
    cond = condition(failed.status, "Failed")
    assert cond.reason == "RestartLimitExceeded"
    assert cond.message == ("no restarts left (maxRestarts 1, 1 used); last failure: "
                            "pod llama-1-a1 (node 1) failed: exit code 2, reason Error")


def test_backoff_counts_restarts_of_either_kind() -> None:
    job = stored_job(2, failurePolicy={"backoff": {"initialSeconds": 10, "maxSeconds": 25}})

    assert [backoff_seconds(job, n) for n in range(4)] == [10.0, 20.0, 25.0, 25.0]


# The policies called directly.

FAILED_POD = Failure(Reason.POD_FAILED, "pod llama-1-a0 (node 1) failed: exit code 1", exit_code=1,
                     reasons=frozenset({Reason.POD_FAILED}))
LOST = Failure(Reason.NODE_LOST, "pod llama-1-a0 of node 1 was deleted", reasons=frozenset({Reason.NODE_LOST}),
               node_loss=True)


@pytest.mark.parametrize(("policy", "failure", "used", "verdict_reason", "counted"), [
    ({}, FAILED_POD, 0, None, True),                                             # the default: a counted restart
    ({}, LOST, 0, None, False),                                                  # node loss: not counted
    ({"maxRestarts": 1}, FAILED_POD, 1, Reason.RESTART_LIMIT_EXCEEDED, None),    # no restarts left
    ({"maxRestarts": 0}, LOST, 0, None, False),                                  # uncounted ones need no budget
    ({"rules": [{"action": "FailJob", "onExitCodes": [{"min": 1, "max": 1}]}]}, FAILED_POD, 0, Reason.POD_FAILED,
     None),
])
def test_the_failure_policy_restarts_the_gang_or_fails_the_job(policy, failure, used, verdict_reason,
                                                               counted) -> None:
    job = stored_job(2, failurePolicy={"backoff": {"initialSeconds": 10, "maxSeconds": 60}, **policy})
    status = TrainingJobStatus(phase=Phase.RUNNING, restarts=used, attempt=0)
    decided = apply_failure_policy(job, status, failure, {0: pod(0), 1: pod(1, "Failed")}, NOW)
    if verdict_reason is not None:
        assert decided.verdict is not None and (decided.verdict.phase, decided.verdict.reason) == (
            Phase.FAILED, verdict_reason)
        assert decided.status == {} and not decided.delete
        return
    assert decided.verdict is None and decided.stop_creating and decided.delete == ("llama-0-a0",)
    edits = decided.status
    assert (edits["phase"], edits["attempt"], edits["restarts"], edits["uncounted_restarts"]) == (
        Phase.RESTARTING, 1, used + counted, 1 - counted)
    assert edits["restart_history"][-1].counted == counted and edits["next_attempt_time"] == rfc3339(
        NOW + timedelta(seconds=10 * 2 ** used))
    assert decided.requeue_after == 10 * 2 ** used
    assert [(c.type, c.reason) for c in decided.conditions] == [("Running", failure.reason)]
    assert [e.reason for e in decided.events] == [Reason.RESTARTING]


@pytest.mark.parametrize(("strategy", "older", "next_at", "reason", "requeue"), [
    ("Recreate", [pod(0, terminating=True)], rfc3339(NOW + timedelta(seconds=30)), Reason.BACKOFF, 30.0),
    ("BlockingRecreate", [pod(0, terminating=True)], None, Reason.WAITING_FOR_OLD_PODS, None),
    ("BlockingRecreate", [], rfc3339(NOW + timedelta(seconds=5)), Reason.BACKOFF, 5.0),
    ("Recreate", [pod(0, terminating=True)], rfc3339(NOW - timedelta(seconds=1)), None, None),   # backoff over
])
def test_the_next_attempt_waits_for_the_backoff_and_blocking_for_the_old_pods(strategy, older, next_at, reason,
                                                                              requeue) -> None:
    job = stored_job(2, failurePolicy={"restartStrategy": strategy})
    status = TrainingJobStatus(phase=Phase.RESTARTING, attempt=1, next_attempt_time=next_at)
    decided = wait_for_next_attempt(job, status, older, NOW)
    if reason is None:
        assert decided == Decision(status={"next_attempt_time": None})
        return
    assert decided.verdict is not None and (decided.verdict.phase, decided.verdict.reason) == (Phase.RESTARTING,
                                                                                                reason)
    assert [(c.type, c.reason) for c in decided.conditions] == [("Running", reason)]
    assert decided.requeue_after == requeue
