"""The composition of one planning pass: what a new job gets, idempotence, which attempt counts, and that a
finished job is never recreated."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase, TrainingJobStatus
from multinode.api.timestamps import rfc3339
from multinode.reconcile.placement import ObservedNode
from multinode.reconcile.progress import JobProgress, RankProgress
from multinode.testing import checkpointed_job
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job


def test_a_new_job_gets_its_service_and_every_pod_and_is_pending() -> None:
    result = run(stored_job(3), [], service_exists=False)

    assert result.service["metadata"]["name"] == "llama"
    assert [p["metadata"]["name"] for p in result.pods_to_create] == ["llama-0-a0", "llama-1-a0", "llama-2-a0"]
    assert result.status.phase == Phase.PENDING
    assert result.status.start_time == "2026-11-20T12:00:00Z"
    assert condition(result.status, "Created").status == "False"
    assert [(e.type, e.reason) for e in result.events] == [("Normal", "CreatingPods")]


def test_replanning_after_the_creates_creates_nothing_more() -> None:
    first = run(stored_job(3), [], service_exists=False)
    again = run(stored_job(3),
                [pod(0, "Pending", node=None), pod(1, "Pending", node=None), pod(2, "Pending", node=None)],
                previous=first.status)

    assert again.service is None and again.pods_to_create == [] and again.pods_to_delete == []
    assert again.status.start_time == first.status.start_time
    assert again.status.phase == Phase.PENDING and again.events == []  # same phase: no second event


def test_only_the_missing_indices_are_created() -> None:
    result = run(stored_job(4), [pod(0), pod(2)])

    assert [p["metadata"]["name"] for p in result.pods_to_create] == ["llama-1-a0", "llama-3-a0"]


def test_pods_of_another_attempt_are_not_counted() -> None:
    result = run(stored_job(2), [pod(0, attempt=1), pod(1, attempt=1)])

    assert len(result.pods_to_create) == 2


def test_a_finished_job_is_never_recreated_even_with_no_pods_left() -> None:
    job = stored_job(2)
    done = run(job, [pod(0, "Succeeded"), pod(1, "Succeeded")])
    assert done.status.phase == Phase.SUCCEEDED

    after_cleanup = run(job, [], previous=done.status, service_exists=False)

    assert after_cleanup.pods_to_create == [] and after_cleanup.service is None
    assert after_cleanup.status.phase == Phase.SUCCEEDED and after_cleanup.events == []


# Precedence: which policy wins when two apply (plan.py's order).

def _ago(seconds: int) -> str:
    return rfc3339(NOW - timedelta(seconds=seconds))


FAILED_1 = [pod(0), pod(1, "Failed", exit_code=1, reason="Error")]


def test_the_deadline_beats_a_failed_pod_and_a_backoff() -> None:
    job = stored_job(2, activeDeadlineSeconds=60)
    running = run(job, [pod(0), pod(1)], previous=TrainingJobStatus(start_time=_ago(30)))
    late = run(job, FAILED_1, previous=running.status, now=NOW + timedelta(seconds=31))
    assert (late.status.phase, condition(late.status, "Failed").reason) == (Phase.FAILED, "DeadlineExceeded")
    assert late.status.restarts == 0 and late.status.restart_history == [], "no restart once the deadline passed"
    restarting = run(job, FAILED_1, previous=running.status)
    assert restarting.status.phase == Phase.RESTARTING
    waited = run(job, [], previous=restarting.status, now=NOW + timedelta(seconds=31))
    assert waited.status.phase == Phase.FAILED and waited.pods_to_create == []


def test_suspend_beats_a_failed_pod_and_a_passed_deadline() -> None:
    job = stored_job(2, suspend=True, activeDeadlineSeconds=60)
    suspended = run(job, FAILED_1, previous=TrainingJobStatus(phase=Phase.RUNNING, start_time=_ago(600)))
    assert suspended.status.phase == Phase.SUSPENDED and suspended.status.restart_history == []
    assert suspended.pods_to_delete == ["llama-0-a0"] and suspended.pods_to_create == []


def test_a_finished_job_only_cleans_up_whatever_its_spec_says_now() -> None:
    job = stored_job(2, suspend=True, activeDeadlineSeconds=1)
    done = TrainingJobStatus(phase=Phase.SUCCEEDED, start_time=_ago(600), completion_time=_ago(10))
    finished = run(job, [pod(0, "Succeeded"), pod(1)], previous=done)
    assert finished.status.phase == Phase.SUCCEEDED and finished.events == []
    assert finished.pods_to_delete == ["llama-1-a0"] and finished.pods_to_create == []


def test_a_failed_pod_beats_a_straggler_whose_node_would_be_excluded() -> None:
    job = stored_job(3, resourcesPerNode={"gpus": 8},
                     hangDetection={"timeoutSeconds": 600, "stragglers": {"forSeconds": 0, "action": "Exclude"}})
    ranks = tuple(RankProgress(i, f"n{i}", 100, NOW, step_seconds=s) for i, s in enumerate((1.0, 1.0, 4.0)))
    cluster = tuple(ObservedNode(name=f"n{i}", labels={}, allocatable={"nvidia.com/gpu": "8"}) for i in range(4))
    pods = [pod(0, node="n0", exit_code=1, phase="Failed", reason="Error"), pod(1, node="n1"), pod(2, node="n2")]
    failed = run(job, pods, progress=JobProgress(0, ranks, NOW, NOW), nodes=cluster)
    assert failed.status.restart_history[-1].reason == "PodFailed" and failed.status.excluded_nodes == []


def test_a_finished_checkpointed_job_waits_for_its_final_sync_before_it_is_terminal() -> None:
    job = checkpointed_job()
    job.spec.active_deadline_seconds = 60
    late = run(job, [pod(0), pod(1)], previous=TrainingJobStatus(phase=Phase.RUNNING, start_time=_ago(61)))
    assert late.status.phase == Phase.RUNNING and late.status.completion_time is None
    assert condition(late.status, "CheckpointsSynced").reason == "FinalSyncWaitingForPods"
    assert late.pods_to_delete == ["llama-0-a0", "llama-1-a0"], "the nodes stop at once"
