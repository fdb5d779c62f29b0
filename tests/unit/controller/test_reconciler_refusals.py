"""What the Reconciler writes when the pods it rendered are refused."""

from __future__ import annotations

import asyncio

import pytest

from multinode.api import TrainingJob
from multinode.controller.kube import ApiError
from multinode.controller.settings import OperatorSettings
from multinode.controller.reconciler import Reconciler
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.filled_stores import filled_stores
from multinode.testing import stored_job

KEY = ("ml", "llama")


def reconciler_of(job: TrainingJob, kube: FakeKube) -> Reconciler:
    stores = filled_stores(job.model_dump(by_alias=True, exclude_none=True, mode="json"))
    return Reconciler(kube, OperatorSettings(), stores)  # type: ignore[arg-type]  # a fake KubeApi


def reconcile_once(job: TrainingJob, kube: FakeKube) -> None:
    asyncio.run(reconciler_of(job, kube).reconcile(KEY))


def condition(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_a_pod_the_apiserver_refuses_fails_the_job_with_its_message() -> None:
    # A passed-through volume of the wrong shape: the apiserver's decoder refuses it with 400 and names the
    # field (the real message is checked by tests/integration/api/test_hostile_specs.py).
    def refuse(namespace: str, body: dict) -> None:
        raise ApiError("create_namespaced_pod", 400, "Bad Request",
                       'Pod in version "v1" cannot be handled as a Pod: json: cannot '
                       "unmarshal number into Go struct field Volume.spec.volumes.hostPath")

    kube = FakeKube(refuse)
    reconcile_once(stored_job(2, podTemplate={"volumes": [{"name": "v", "hostPath": 5}]}), kube)

    status = kube.statuses[-1]
    assert status["phase"] == "Failed"
    failed = condition(status, "Failed")
    assert failed["reason"] == "PodCreationFailed"
    assert "Volume.spec.volumes.hostPath" in failed["message"]


def test_a_server_error_on_create_is_retried_not_a_failed_job() -> None:
    def unavailable(namespace: str, body: dict) -> None:
        raise ApiError("create_namespaced_pod", 503, "Service Unavailable", "503 Service Unavailable")

    kube = FakeKube(unavailable)
    with pytest.raises(ApiError):  # the worker's retry with backoff
        reconcile_once(stored_job(2), kube)
    assert all(s.get("phase") != "Failed" for s in kube.statuses)


def test_a_pod_the_cluster_forbids_keeps_the_job_pending_and_says_why() -> None:
    # 403 comes from the cluster, not the spec (a PriorityClass or ServiceAccount not created yet, a
    # quota): the worker retries it, and until then the job's status says what stops it.
    def forbid(namespace: str, body: dict) -> None:
        raise ApiError("create_namespaced_pod", 403, "Forbidden",
                       f'pods "{body["metadata"]["name"]}" is forbidden: no PriorityClass with name training was found')

    kube = FakeKube(forbid)
    with pytest.raises(ApiError):  # the worker's retry with backoff
        reconcile_once(stored_job(2, podTemplate={"priorityClassName": "training"}), kube)

    status = kube.statuses[-1]
    assert status["phase"] == "Pending"
    running = condition(status, "Running")
    assert running["reason"] == "PodCreationForbidden"
    assert "is forbidden: no PriorityClass with name training was found" in running["message"]


def test_a_status_field_the_planner_cleared_is_removed_with_an_explicit_null() -> None:
    from multinode.api import TrainingJobStatus
    from multinode.controller.status_patch import status_patch

    before = TrainingJobStatus(phase="Restarting", next_attempt_time="2026-11-20T12:00:05Z", attempt=1)
    desired = {"phase": "Pending", "attempt": 1}
    patch = status_patch(desired, before, {"phase": "Restarting", "nextAttemptTime": "2026-11-20T12:00:05Z",
                                           "checkpoints": {"mirrored": 1}})

    assert patch["nextAttemptTime"] is None and patch["phase"] == "Pending"
    assert "checkpoints" not in patch, "the mirror's field is never touched"


def test_a_create_that_got_no_answer_is_retried_and_not_taken_as_created() -> None:
    # A timeout says nothing about whether the pod exists: only 409 counts as created (the next reconcile
    # creates it again, and gets 409 if the first create did land).
    def timed_out(namespace: str, body: dict) -> None:
        raise ApiError("create_namespaced_pod", None, "ReadTimeoutError", "read timed out")

    kube = FakeKube(timed_out)
    reconciler = reconciler_of(stored_job(2), kube)
    with pytest.raises(ApiError):
        asyncio.run(reconciler.reconcile(KEY))
    assert KEY not in reconciler.applier.expectations.by_job
