"""What a refused create means for the job (refusals.py), from the apiserver's status and message alone."""

from __future__ import annotations

import pytest

from multinode.api import Phase
from multinode.integrations.registry import INTEGRATIONS
from multinode.reconcile.refusals import Refusal, classify, counts_as_created, creation_refused, foreign_object_found
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job


@pytest.mark.parametrize(("status", "refusal"), [
    (409, Refusal.ALREADY_EXISTS), (403, Refusal.FORBIDDEN), (400, Refusal.INVALID), (422, Refusal.INVALID),
    (404, Refusal.TRANSIENT), (429, Refusal.TRANSIENT), (500, Refusal.TRANSIENT), (503, Refusal.TRANSIENT),
    (None, Refusal.TRANSIENT),  # no answer: a timeout or a broken connection
])
def test_each_status_is_classified(status: int | None, refusal: Refusal) -> None:
    assert classify(status) is refusal


def test_only_a_conflict_counts_as_created() -> None:
    assert counts_as_created(409)
    assert not any(counts_as_created(status) for status in (400, 403, 404, 422, 500, 503, None))


def test_forbidden_keeps_the_job_pending_says_why_and_retries() -> None:
    job = stored_job(2, podTemplate={"priorityClassName": "training"})
    message = 'pods "llama-0-a0" is forbidden: no PriorityClass with name training was found'

    refused = creation_refused(job, run(job, []), [], 403, message, now=NOW, integrations=INTEGRATIONS)

    assert refused.retry and refused.plan is not None
    assert refused.plan.status.phase == Phase.PENDING
    running = condition(refused.plan.status, "Running")
    assert (running.status, running.reason, running.message) == ("False", "PodCreationForbidden", message)


def test_a_foreign_object_keeps_the_job_from_going_on_says_which_and_retries() -> None:
    job = stored_job(2)
    message = "ConfigMap ml/llama-a0-0123abcd exists and is not this job's (controlled by nothing): ..."
    refused = foreign_object_found(job, run(job, []), message, now=NOW)
    assert refused.retry and refused.plan is not None
    running = condition(refused.plan.status, "Running")
    assert (running.status, running.reason, running.message) == ("False", "ForeignObject", message)


@pytest.mark.parametrize("status", [400, 422])
def test_invalid_fails_the_job_with_the_apiservers_message_and_is_not_retried(status: int) -> None:
    job = stored_job(2)
    message = "json: cannot unmarshal number into Go struct field Volume.spec.volumes.hostPath"

    refused = creation_refused(job, run(job, [pod(0, "Pending")]), [pod(0, "Pending")], status, message, now=NOW)

    assert not refused.retry and refused.plan is not None
    assert refused.plan.status.phase == Phase.FAILED
    assert refused.plan.pods_to_create == [] and refused.plan.pods_to_delete == ["llama-0-a0"]
    failed = condition(refused.plan.status, "Failed")
    assert (failed.reason, failed.message) == ("PodCreationFailed", message)


@pytest.mark.parametrize("status", [500, 503, None])
def test_anything_else_writes_nothing_and_is_retried(status: int | None) -> None:
    job = stored_job(2)
    refused = creation_refused(job, run(job, []), [], status, "etcdserver: request timed out", now=NOW,
                               integrations=INTEGRATIONS)
    assert refused.retry and refused.plan is None


@pytest.mark.parametrize(("status", "api_version"), [
    (403, None), (404, "scheduling.volcano.sh/v1beta1"), (404, "kueue.x-k8s.io/v1beta2"), (422, None)])
def test_a_refusal_returns_a_changed_copy_and_leaves_the_plan_it_was_given(status, api_version) -> None:
    job = stored_job(2)
    result = run(job, [pod(0)])
    kept = result.status.model_copy(deep=True)
    refused = creation_refused(job, result, [pod(0)], status, "refused", now=NOW, api_version=api_version,
                               integrations=INTEGRATIONS)
    assert refused.plan is not None and refused.plan is not result and refused.plan.status != kept
    assert result.status == kept
    assert foreign_object_found(job, result, "taken", now=NOW).plan.status != kept and result.status == kept
