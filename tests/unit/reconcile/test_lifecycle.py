"""Suspend and resume, the active deadline, TTL and what a finished job keeps (lifecycle.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from multinode.api import Phase, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.timestamps import rfc3339
from multinode.reconcile import lifecycle
from multinode.reconcile.outcome import Verdict
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job


def test_created_suspended_the_job_waits_without_pods_then_starts_attempt_0() -> None:
    suspended = run(stored_job(2, suspend=True), [], service_exists=False)

    assert suspended.pods_to_create == [] and suspended.status.phase == Phase.SUSPENDED
    assert condition(suspended.status, "Suspended").status == "True"
    assert suspended.status.start_time is None

    admitted = run(stored_job(2), [], previous=suspended.status)
    assert [p["metadata"]["name"] for p in admitted.pods_to_create] == ["llama-0-a0", "llama-1-a0"]
    assert condition(admitted.status, "Suspended").status == "False"
    assert admitted.status.uncounted_restarts == 0


def test_suspending_a_running_job_deletes_its_pods_and_resuming_starts_a_new_attempt() -> None:
    running = run(stored_job(2), [pod(0), pod(1)])
    suspended = run(stored_job(2, suspend=True), [pod(0), pod(1)], previous=running.status)

    assert suspended.pods_to_delete == ["llama-0-a0", "llama-1-a0"]
    assert suspended.status.phase == Phase.SUSPENDED and suspended.status.restarts == 0

    resumed = run(stored_job(2), [], previous=suspended.status)
    assert [p["metadata"]["name"] for p in resumed.pods_to_create] == ["llama-0-a1", "llama-1-a1"]
    assert (resumed.status.restarts, resumed.status.uncounted_restarts) == (0, 1)
    assert "Resumed" in [e.reason for e in resumed.events]


def test_active_deadline_fails_the_job_and_is_timed() -> None:
    job = stored_job(2, activeDeadlineSeconds=600)
    running = run(job, [pod(0), pod(1)])
    assert running.requeue_after == 600.0

    late = run(job, [pod(0), pod(1)], previous=running.status, now=NOW + timedelta(seconds=601))
    assert late.status.phase == Phase.FAILED
    assert condition(late.status, "Failed").reason == "DeadlineExceeded"
    assert late.pods_to_delete == ["llama-0-a0", "llama-1-a0"]


def test_ttl_deletes_the_finished_job_when_due() -> None:
    job = stored_job(2, ttlSecondsAfterFinished=60)
    done = run(job, [pod(0, "Succeeded"), pod(1, "Succeeded")])

    soon = run(job, [pod(0, "Succeeded"), pod(1, "Succeeded")], previous=done.status, now=NOW + timedelta(seconds=30))
    assert not soon.delete_job and soon.requeue_after == 30.0

    due = run(job, [], previous=done.status, now=NOW + timedelta(seconds=60))
    assert due.delete_job and due.pods_to_create == []


def test_clean_pod_policy_decides_what_a_finished_job_keeps() -> None:
    pods = [pod(0, "Succeeded"), pod(1, "Running"), pod(0, "Failed", attempt=0)]

    def finished(policy: str):
        job = stored_job(2, cleanPodPolicy=policy, successPolicy="LeaderOnly")
        return run(job, pods[:2]), job

    done, job = finished("Running")
    assert done.status.phase == Phase.SUCCEEDED and done.pods_to_delete == ["llama-1-a0"]
    all_, job = finished("All")
    after = run(job, pods[:2], previous=all_.status)
    assert after.pods_to_delete == ["llama-0-a0", "llama-1-a0"]
    none, _ = finished("None")
    assert none.pods_to_delete == []


# The policies called directly: each returns a Decision and changes nothing it is given.

def _ago(seconds: int) -> str:
    return rfc3339(NOW - timedelta(seconds=seconds))


@pytest.mark.parametrize(("deadline", "started", "reason", "requeue"), [
    (None, _ago(10_000), None, None),          # no deadline: no verdict, no timer
    (600, None, None, None),                   # not started: nothing counts yet
    (600, _ago(100), None, 500.0),             # a timer for when it passes
    (600, _ago(600), Reason.DEADLINE_EXCEEDED, None),
])
def test_the_deadline_fails_the_job_once_passed_else_sets_a_timer(deadline, started, reason, requeue) -> None:
    decided = lifecycle.deadline(stored_job(2, activeDeadlineSeconds=deadline), TrainingJobStatus(start_time=started),
                                 NOW)
    assert (decided.verdict.reason if decided.verdict else None, decided.requeue_after) == (reason, requeue)
    assert decided.verdict is None or decided.verdict.phase == Phase.FAILED


@pytest.mark.parametrize(("current", "previous", "attempt", "uncounted", "deleted"), [
    ({}, TrainingJobStatus(phase=Phase.SUSPENDED), 0, 0, ()),                    # created suspended: just starts
    ({0: pod(0)}, TrainingJobStatus(phase=Phase.SUSPENDED), 1, 1, ("llama-0-a0",)),  # had pods: a new attempt
    ({}, TrainingJobStatus(phase=Phase.SUSPENDED, attempt_start_time=_ago(60)), 1, 1, ()),
])
def test_resuming_starts_a_new_uncounted_attempt_only_for_a_job_that_ran(current, previous, attempt, uncounted,
                                                                       deleted) -> None:
    decided = lifecycle.resume(previous, current)
    assert decided.status["phase"] == Phase.PENDING and decided.status["next_attempt_time"] is None
    assert (decided.status.get("attempt", 0), decided.status.get("uncounted_restarts", 0)) == (attempt, uncounted)
    assert decided.delete == deleted
    assert [e.message for e in decided.events] == [f"resumed as attempt {attempt}"]


@pytest.mark.parametrize(("why", "current", "deleted"), [
    ("spec.suspend is true", {}, ()),
    ("queued in Kueue, not admitted", {0: pod(0), 1: pod(1, "Succeeded")}, ("llama-0-a0",)),
])
def test_suspending_creates_nothing_and_deletes_the_active_pods(why, current, deleted) -> None:
    decided = lifecycle.suspend(stored_job(2), TrainingJobStatus(), current, why)
    assert decided.verdict == Verdict(Phase.SUSPENDED, Reason.SUSPENDED, f"{why}; no pods run")
    assert decided.stop_creating and decided.delete == deleted
    assert [(c.type, c.status) for c in decided.conditions] == [("Suspended", "True"), ("Running", "False")]
    assert (decided.status["ready_nodes"], decided.status["ready"]) == (0, "0/2")


@pytest.mark.parametrize(("ttl", "completed", "policy", "delete_job", "requeue", "deleted"), [
    (None, _ago(10), "Running", False, None, ("llama-0-a0",)),
    (60, _ago(10), "Running", False, 50.0, ("llama-0-a0",)),
    (60, _ago(60), "All", True, None, ("llama-0-a0", "llama-1-a0")),
    (None, _ago(10), "None", False, None, ()),
])
def test_a_finished_job_cleans_up_by_policy_and_goes_after_its_ttl(ttl, completed, policy, delete_job, requeue,
                                                                   deleted) -> None:
    job = stored_job(2, ttlSecondsAfterFinished=ttl, cleanPodPolicy=policy)
    decided = lifecycle.clean_up_finished(job, TrainingJobStatus(phase=Phase.SUCCEEDED, completion_time=completed),
                                          [pod(0), pod(1, "Succeeded")], None, NOW)
    assert (decided.delete_job, decided.requeue_after, decided.delete) == (delete_job, requeue, deleted)
