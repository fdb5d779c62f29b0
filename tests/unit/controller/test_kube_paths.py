"""Request paths: names from a job's spec go in as one quoted segment (none reaches another path); what a
listing by label finds is deleted only when the job owns it."""

from __future__ import annotations

import asyncio
import json

import pytest

from multinode.integrations.coscheduling import COSCHEDULING_POD_GROUP
from multinode.integrations.kueue import WORKLOAD
from multinode.integrations.volcano import VOLCANO_POD_GROUP
from multinode.reconcile.kinds import StatusWrite

from tests.unit.controller.fake_http import Pool, Response, kube_with

PRIORITY_CLASSES = "https://apiserver/apis/scheduling.k8s.io/v1/priorityclasses/"


def test_a_priority_class_name_is_one_quoted_segment_of_the_path() -> None:
    pool = Pool([Response(200, data=json.dumps({"value": 7}).encode()), Response(404, reason="NotFound")])
    kube, _, _ = kube_with(pool)
    assert asyncio.run(kube.priority_class_value("training-high")) == 7
    # Stored before the CRD checked it: urllib3 would resolve the '..' and read a Secret instead.
    assert asyncio.run(kube.priority_class_value("../../../api/v1/namespaces/kube-system/secrets/x?watch=1")) is None
    assert [url for _, url, _ in pool.sent] == [
        PRIORITY_CLASSES + "training-high",
        PRIORITY_CLASSES + "..%2F..%2F..%2Fapi%2Fv1%2Fnamespaces%2Fkube-system%2Fsecrets%2Fx%3Fwatch%3D1"]


@pytest.mark.parametrize("name", [".", ".."])
def test_a_dot_segment_is_no_name(name: str) -> None:
    kube, _, _ = kube_with(Pool([]))
    with pytest.raises(ValueError, match="is not an object name"):
        asyncio.run(kube.priority_class_value(name))


def test_a_gang_schedulers_groups_are_listed_by_the_jobs_label_and_deleted_by_name() -> None:
    owned = [{"apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob", "name": "llama", "uid": "u1",
              "controller": True}]
    groups = {"items": [
        {"metadata": {"name": "llama-a0", "labels": {"multinode.dev/attempt": "0"}, "ownerReferences": owned}},
        {"metadata": {"name": "look-alike", "labels": {"multinode.dev/attempt": "0"}}},  # the label, not the owner
        {"metadata": {"name": "llama-a1", "labels": {"multinode.dev/attempt": "1"}, "ownerReferences": owned}},
    ]}
    pool = Pool([Response(200, data=json.dumps(groups).encode()), Response(200)])
    kube, _, _ = kube_with(pool)
    api = "scheduling.x-k8s.io/v1alpha1"
    listed = asyncio.run(kube.list_job_objects("ml", COSCHEDULING_POD_GROUP, "llama"))
    assert [g["metadata"]["name"] for g in listed] == ["llama-a0", "look-alike", "llama-a1"]
    asyncio.run(kube.delete_object("ml", COSCHEDULING_POD_GROUP, "llama-a0"))
    assert [(m, u) for m, u, _ in pool.sent] == [
        ("GET", f"https://apiserver/apis/{api}/namespaces/ml/podgroups?labelSelector=multinode.dev/job-name%3Dllama"),
        ("DELETE", f"https://apiserver/apis/{api}/namespaces/ml/podgroups/llama-a0")]


def test_a_gang_schedulers_kind_not_served_lists_no_group() -> None:
    kube, _, _ = kube_with(Pool([Response(404, reason="NotFound")]))
    assert asyncio.run(kube.list_job_objects("ml", VOLCANO_POD_GROUP, "llama")) == []


def test_an_integrations_status_write_is_guarded_by_the_resource_version_read() -> None:
    pool = Pool([Response(200)])
    kube, _, _ = kube_with(pool)
    asyncio.run(kube.patch_object_status("ml", StatusWrite(WORKLOAD, "trainingjob-llama-abcde", "7", {"a": 1})))
    [(method, url, body)] = pool.sent
    assert method == "PATCH"
    assert url == "https://apiserver/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/trainingjob-llama-abcde/status"
    assert json.loads(body) == {"metadata": {"resourceVersion": "7"}, "status": {"a": 1}}


def test_a_status_patch_gives_the_jobs_resource_version_after_it_and_none_once_the_job_is_gone() -> None:
    job = {"apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "llama", "namespace": "ml", "resourceVersion": "4711"}, "status": {"phase": "Running"}}
    pool = Pool([Response(200, data=json.dumps(job).encode()), Response(404, reason="NotFound")])
    kube, _, _ = kube_with(pool)
    assert asyncio.run(kube.patch_job_status("ml", "llama", {"phase": "Running"})) == "4711"
    assert asyncio.run(kube.patch_job_status("ml", "llama", {"phase": "Running"})) is None
    assert [(m, u) for m, u, _ in pool.sent] == [
        ("PATCH", "https://apiserver/apis/multinode.dev/v1alpha1/namespaces/ml/trainingjobs/llama/status")] * 2
