"""A job uses only objects it owns: a name taken by someone else's object stops it with ForeignObject, and a pod
with the job's labels but another owner is not one of its ranks (the real apiserver:
tests/integration/controller/test_foreign_objects.py)."""

from __future__ import annotations

import asyncio

import pytest

from multinode.api import TrainingJob
from multinode.controller.ownership import ForeignObject
from multinode.controller.settings import OperatorSettings
from multinode.controller.reconciler import Reconciler
from multinode.reconcile import ObservedPod
from multinode.reconcile.ownership import OwnedName
from multinode.render.attempt_env import attempt_env_name
from multinode.render.names import owner_reference
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.filled_stores import filled_stores
from multinode.testing import stored_job

KEY = ("ml", "llama")
UID = "uid-123"  # stored_job's


def reconciler_of(job: TrainingJob, kube: FakeKube, pods: list[ObservedPod] | None = None) -> Reconciler:
    stores = filled_stores(job.model_dump(by_alias=True, exclude_none=True, mode="json"), pods=pods or [],
                           services=[OwnedName("llama", UID)])
    return Reconciler(kube, OperatorSettings(), stores)  # type: ignore[arg-type]  # a fake KubeApi


def running_condition(kube: FakeKube) -> dict:
    return next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "Running")


def test_a_configmap_someone_else_made_under_the_attempts_name_is_not_used_and_the_job_says_so() -> None:
    job = stored_job(2)
    env = attempt_env_name(job, 0)
    kube = FakeKube(existing={("ConfigMap", env): {"name": env, "managedFields": [{"manager": "kubectl"}]}})
    with pytest.raises(ForeignObject):  # the worker's retry with backoff
        asyncio.run(reconciler_of(job, kube).reconcile(KEY))
    assert ("ConfigMap", env) in kube.reads
    assert not [c for c in kube.made if c[0] == "Pod"], "no pod may read a foreign environment"
    running = running_condition(kube)
    assert (running["status"], running["reason"]) == ("False", "ForeignObject")
    assert f"ConfigMap ml/{env} exists and is not this job's (controlled by nothing)" in running["message"]


def test_its_own_configmap_found_after_a_restart_is_used() -> None:
    job = stored_job(2)
    env = attempt_env_name(job, 0)
    kube = FakeKube(existing={("ConfigMap", env): {"name": env, "ownerReferences": [owner_reference(job)]}})
    asyncio.run(reconciler_of(job, kube).reconcile(KEY))
    assert sorted(n for k, n in kube.made if k == "Pod") == ["llama-0-a0", "llama-1-a0"]


def test_a_pod_with_the_jobs_labels_and_name_but_another_owner_is_not_a_rank_of_the_job() -> None:
    job = stored_job(2)
    other = {**owner_reference(job), "uid": "someone-else"}  # an earlier job of the same name, say
    stranger = ObservedPod(name="llama-0-a0", job_name="llama", index=0, attempt=0, phase="Running", ready=True,
                           owner_uid="someone-else")
    kube = FakeKube(existing={("Pod", "llama-0-a0"): {"name": "llama-0-a0", "ownerReferences": [other]}})
    with pytest.raises(ForeignObject):
        asyncio.run(reconciler_of(job, kube, [stranger]).reconcile(KEY))
    assert ("Pod", "llama-1-a0") in kube.made  # its own rank is made; the other name is in the way
    running = running_condition(kube)
    assert running["reason"] == "ForeignObject"
    assert "Pod ml/llama-0-a0 exists and is not this job's (controlled by TrainingJob llama (uid someone-else))" \
        in running["message"]
    assert all(n.get("phase") != "Running" for n in kube.statuses[-1].get("nodeStatuses") or [])


def test_its_own_pod_not_indexed_yet_counts_as_created() -> None:
    job = stored_job(2)
    kube = FakeKube(existing={("Pod", "llama-0-a0"): {"name": "llama-0-a0", "ownerReferences": [owner_reference(job)]}})
    r = reconciler_of(job, kube)
    asyncio.run(r.reconcile(KEY))
    assert ("Pod", "llama-1-a0") in kube.made and ("Pod", "llama-0-a0") in kube.reads
    assert set(r.applier.expectations.by_job[KEY]) == {"llama-0-a0", "llama-1-a0"}
