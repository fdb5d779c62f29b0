"""Suspend and resume, the active deadline, TTL and what a finished job keeps (lifecycle.py)."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
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
