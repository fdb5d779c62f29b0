"""How a verdict shows in the status (status_report.py): condition transitions and a failed job's status."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from multinode.api.status import MAX_CONDITION_MESSAGE
from multinode.reconcile.status_report import fail_job
from tests.unit.reconcile.planning import NOW, condition, pod, run
from localcluster.harness.trainingjobs import stored_job


def test_last_transition_time_moves_only_when_the_status_flips() -> None:
    job = stored_job(2)
    first = run(job, [pod(0, "Pending", node=None), pod(1, "Pending", node=None)])
    later = run(job, [pod(0, "Pending"), pod(1, "Running")], previous=first.status, now=NOW + timedelta(seconds=30))

    before, after = condition(first.status, "Running"), condition(later.status, "Running")
    assert before.message != after.message
    assert after.last_transition_time == before.last_transition_time == "2026-11-20T12:00:00Z"


def test_fail_job_keeps_nothing_running_and_says_why() -> None:
    result = run(stored_job(2), [pod(0)])

    failed = fail_job(result, "PodCreationFailed", "spec.volumes[0]: Invalid value", now=NOW, pods=[pod(0)])

    assert failed.pods_to_create == [] and failed.pods_to_delete == ["llama-0-a0"]
    assert failed.status.phase == Phase.FAILED
    assert condition(failed.status, "Failed").message == "spec.volumes[0]: Invalid value"


def test_fail_job_with_a_message_too_long_for_a_condition_keeps_its_start() -> None:
    # The apiserver echoes invalid values: a 70,000-character pod label key makes a 70,000-character refusal.
    refusal = 'Pod "llama-0-a0" is invalid: metadata.labels: Invalid value: "' + "b" * 70_000 + '"'
    failed = fail_job(run(stored_job(2), []), "PodCreationFailed", refusal, now=NOW, pods=[])

    message = condition(failed.status, "Failed").message
    assert len(message) == MAX_CONDITION_MESSAGE and message.endswith("(truncated)")
    assert message.startswith('Pod "llama-0-a0" is invalid: metadata.labels: Invalid value: "bbb')
