"""The composition of one planning pass: what a new job gets, idempotence, which attempt counts, and that a
finished job is never recreated."""

from __future__ import annotations

from multinode.api import Phase
from tests.unit.reconcile.planning import condition, pod, run
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
