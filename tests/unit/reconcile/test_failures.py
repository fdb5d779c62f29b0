"""What failed an attempt and what the failure policy's rules say (failures.py)."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from tests.unit.reconcile.planning import NOW, condition, fail_node_1, pod, run
from multinode.testing import stored_job


def test_a_failed_pod_with_a_fail_job_rule_fails_the_job_names_it_and_stops_the_others() -> None:
    job = stored_job(3, failurePolicy={"rules": [{"action": "FailJob", "onExitCodes": [{"min": 3, "max": 3}]}]})
    running = run(job, [pod(0), pod(1), pod(2)])
    later = NOW + timedelta(minutes=5)
    failed = run(job, [pod(0), pod(1, "Failed", exit_code=3, reason="Error"), pod(2)], previous=running.status,
                 now=later)

    assert failed.status.phase == Phase.FAILED
    cond = condition(failed.status, "Failed")
    assert (cond.status, cond.reason) == ("True", "PodFailed")
    assert cond.message == ("pod llama-1-a0 (node 1) failed: exit code 3, reason Error "
                            "(failurePolicy.rules[0]: FailJob)")
    assert failed.pods_to_delete == ["llama-0-a0", "llama-2-a0"]
    assert failed.status.completion_time == "2026-11-20T12:05:00Z"
    assert [(e.type, e.reason) for e in failed.events] == [("Warning", "PodFailed")]


def test_a_pod_that_vanished_after_being_seen_restarts_the_gang_without_counting() -> None:
    job = stored_job(2)
    running = run(job, [pod(0), pod(1)])
    after_eviction = run(job, [pod(0)], previous=running.status)

    assert after_eviction.pods_to_create == [], "never one pod recreated alone"
    assert after_eviction.pods_to_delete == ["llama-0-a0"]
    status = after_eviction.status
    assert (status.phase, status.attempt, status.restarts, status.uncounted_restarts) == (Phase.RESTARTING, 1, 0, 1)
    assert status.restart_history[-1].reason == "NodeLost" and not status.restart_history[-1].counted


def test_exit_codes_marked_permanent_fail_at_once() -> None:
    job = stored_job(2, failurePolicy={"rules": [{"action": "FailJob", "onExitCodes": [{"min": 1, "max": 127}]}]})

    assert fail_node_1(job, exit_code=2).status.phase == Phase.FAILED
    assert fail_node_1(job, exit_code=137).status.phase == Phase.RESTARTING


def test_disruptions_restart_without_counting_by_default_and_rules_can_say_otherwise() -> None:
    evicted = fail_node_1(stored_job(2), exit_code=143, disruption="DeletionByTaintManager")
    assert (evicted.status.restarts, evicted.status.uncounted_restarts) == (0, 1)

    strict = stored_job(2, failurePolicy={"rules": [{"action": "Restart", "onNodeLoss": True}]})
    counted = fail_node_1(strict, exit_code=143, disruption="DeletionByTaintManager")
    assert (counted.status.restarts, counted.status.uncounted_restarts) == (1, 0)


def test_oom_can_be_matched_by_reason() -> None:
    job = stored_job(2, failurePolicy={"rules": [{"action": "FailJob", "onReasons": ["OOMKilled"]}]})
    running = run(job, [pod(0), pod(1)])
    oom = run(job, [pod(0), pod(1, "Failed", exit_code=137, reason="OOMKilled")], previous=running.status)

    assert oom.status.phase == Phase.FAILED and "OOMKilled" in condition(oom.status, "Failed").message
