"""What the Reconciler writes when the pods it rendered are refused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
from kubernetes import client

from multinode.api import TrainingJob
from multinode.controller.settings import OperatorSettings
from multinode.controller.worker import Reconciler
from tests.unit.render.render_job_factory import make_job

KEY = ("ml", "llama")


class FakeKube:
    """Records the Reconciler's writes; pod creation goes through `create_pod`."""

    def __init__(self, create_pod: Callable[[str, dict], None]):
        self._create_pod = create_pod
        self.statuses: list[dict] = []

    async def create_service(self, namespace: str, body: dict) -> None:
        pass

    async def create(self, namespace: str, body: dict) -> None:
        pass

    async def create_pod(self, namespace: str, body: dict) -> None:
        self._create_pod(namespace, body)

    async def delete_pod(self, namespace: str, name: str) -> None:
        pass

    async def patch_job_status(self, namespace: str, name: str, status: dict) -> None:
        self.statuses.append(status)

    async def post_event(self, job_meta: dict, event_type: str, reason: str, message: str) -> None:
        pass


def reconcile_once(job: TrainingJob, kube: FakeKube) -> None:
    reconciler = Reconciler(kube, OperatorSettings())  # type: ignore[arg-type]
    reconciler.jobs = {KEY: [job.model_dump(by_alias=True, exclude_none=True, mode="json")]}
    asyncio.run(reconciler.reconcile(KEY))


def condition(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_a_pod_the_client_refuses_before_sending_fails_the_job_naming_the_field() -> None:
    # The official client validates a pod against its typed models before sending it: a passed-through
    # volume of the wrong shape raises pydantic's ValidationError, not an ApiException.
    typed_client = client.CoreV1Api(client.ApiClient())
    kube = FakeKube(lambda namespace, body: typed_client.create_namespaced_pod(namespace, body))
    job = make_job(2, podTemplate={"volumes": [{"name": "v", "hostPath": 5}]})

    reconcile_once(job, kube)

    status = kube.statuses[-1]
    assert status["phase"] == "Failed"
    failed = condition(status, "Failed")
    assert failed["reason"] == "PodCreationFailed"
    assert "the pod does not fit the Kubernetes API: spec.volumes." in failed["message"]
    assert "hostPath" in failed["message"]


def test_a_pod_the_cluster_forbids_keeps_the_job_pending_and_says_why() -> None:
    # 403 comes from the cluster, not the spec (a PriorityClass or ServiceAccount not created yet, a
    # quota): the worker retries it, and until then the job's status says what stops it.
    def forbid(namespace: str, body: dict) -> None:
        error = client.ApiException(status=403, reason="Forbidden")
        error.body = json.dumps({"message": f'pods "{body["metadata"]["name"]}" is forbidden: '
                                            "no PriorityClass with name training was found"})
        raise error

    kube = FakeKube(forbid)
    with pytest.raises(client.ApiException):  # the worker's retry with backoff
        reconcile_once(make_job(2, podTemplate={"priorityClassName": "training"}), kube)

    status = kube.statuses[-1]
    assert status["phase"] == "Pending"
    running = condition(status, "Running")
    assert running["reason"] == "PodCreationForbidden"
    assert "is forbidden: no PriorityClass with name training was found" in running["message"]


def test_a_status_field_the_planner_cleared_is_removed_with_an_explicit_null() -> None:
    from multinode.api import TrainingJobStatus
    from multinode.controller.worker import status_patch

    before = TrainingJobStatus(phase="Restarting", next_attempt_time="2026-11-20T12:00:05Z", attempt=1)
    desired = {"phase": "Pending", "attempt": 1}
    patch = status_patch(desired, before, {"phase": "Restarting", "nextAttemptTime": "2026-11-20T12:00:05Z",
                                           "checkpoints": {"mirrored": 1}})

    assert patch["nextAttemptTime"] is None and patch["phase"] == "Pending"
    assert "checkpoints" not in patch, "the mirror's field is never touched"
