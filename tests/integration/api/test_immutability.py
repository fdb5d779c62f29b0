"""Every spec field is frozen after creation; metadata stays editable.

One job is created for real; each update is a server-side dry run against it, so the transition rules
(which compare the new object with the stored one) run exactly as for a real update.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterator

import pytest
import yaml
from kubernetes import client

from multinode.api import GROUP, PLURAL, VERSION
from multinode.api.spec import TrainingJobSpec
from tests.integration.api.admission import create, maximal_job, replace, replace_rejected
from multinode.testing import training_job
from tests.support.jobs import apply
from localcluster.harness.kube import kubectl

JOB = "frozen"


@pytest.fixture(scope="module")
def stored_job(custom: client.CustomObjectsApi, admission_namespace: str) -> Iterator[dict]:
    body = maximal_job(JOB)
    # Absent at creation, so that adding them is an update to test.
    for field in ("accelerator", "numProcPerNode", "args"):
        del body["spec"][field]
    created = create(custom, admission_namespace, body, dry_run=False)
    yield created
    custom.delete_namespaced_custom_object(GROUP, VERSION, admission_namespace, PLURAL, JOB)


def current(custom: client.CustomObjectsApi, namespace: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, JOB)


def set_(field: str, value) -> Callable[[dict], None]:
    return lambda spec: spec.__setitem__(field, value)


def remove(field: str) -> Callable[[dict], None]:
    return lambda spec: spec.pop(field)


def nested(field: str, key: str, value) -> Callable[[dict], None]:
    return lambda spec: spec[field].__setitem__(key, value)


# One update per spec field (by wire name): change, add or remove it.
UPDATES: dict[str, list] = {
    "numNodes": [pytest.param(set_("numNodes", 8), id="numNodes-change")],
    "spareNodes": [pytest.param(set_("spareNodes", 1), id="spareNodes-change")],
    "elastic": [pytest.param(set_("elastic", {"minNodes": 1}), id="elastic-add")],
    "numProcPerNode": [pytest.param(set_("numProcPerNode", 4), id="numProcPerNode-add")],
    "image": [pytest.param(set_("image", "registry.example.com/train:1.3"), id="image-change")],
    "imagePullPolicy": [pytest.param(remove("imagePullPolicy"), id="imagePullPolicy-remove")],
    "command": [pytest.param(set_("command", ["python", "train.py"]), id="command-change")],
    "args": [pytest.param(set_("args", ["--resume"]), id="args-add")],
    "workingDir": [pytest.param(remove("workingDir"), id="workingDir-remove")],
    "env": [pytest.param(lambda spec: spec["env"].append({"name": "NEW", "value": "1"}), id="env-append")],
    "resourcesPerNode": [pytest.param(nested("resourcesPerNode", "gpus", 4), id="resourcesPerNode-gpus-change")],
    "accelerator": [pytest.param(set_("accelerator", "NVIDIA-A100-SXM4-80GB"), id="accelerator-add")],
    "shmSize": [pytest.param(remove("shmSize"), id="shmSize-remove")],
    "network": [pytest.param(nested("network", "rendezvousPort", 29501), id="network-port-change"),
                pytest.param(remove("network"), id="network-remove")],
    "successPolicy": [pytest.param(set_("successPolicy", "AllNodes"), id="successPolicy-change")],
    "podTemplate": [pytest.param(nested("podTemplate", "labels", {"team": "infra"}), id="podTemplate-labels-change")],
    "cache": [pytest.param(nested("cache", "claimName", "other-cache"), id="cache-claim-change")],
    "checkpointing": [pytest.param(nested("checkpointing", "keep", 10), id="checkpointing-keep-change"),
                      pytest.param(remove("checkpointing"), id="checkpointing-remove")],
    "cleanPodPolicy": [pytest.param(set_("cleanPodPolicy", "None"), id="cleanPodPolicy-change")],
    "startupTimeoutSeconds": [pytest.param(remove("startupTimeoutSeconds"), id="startupTimeoutSeconds-remove")],
    "imageConsistency": [pytest.param(nested("imageConsistency", "pinDigest", False), id="imageConsistency-change")],
    "topology": [pytest.param(remove("topology"), id="topology-remove")],
    "podGroup": [pytest.param(nested("podGroup", "minMember", 2), id="podGroup-change")],
    "healthCheck": [pytest.param(nested("healthCheck", "gpus", False), id="healthCheck-gpus-change")],
    # Mutable: lifecycle knobs may change while the job exists.
    "suspend": [pytest.param(set_("suspend", True), id="suspend-change")],
    "activeDeadlineSeconds": [pytest.param(set_("activeDeadlineSeconds", 3600), id="activeDeadlineSeconds-change")],
    "ttlSecondsAfterFinished": [pytest.param(set_("ttlSecondsAfterFinished", 60), id="ttl-change")],
    "failurePolicy": [pytest.param(nested("failurePolicy", "maxRestarts", 9), id="failurePolicy-change"),
                      pytest.param(nested("failurePolicy", "nodeLossTolerationSeconds", 60),
                                   id="failurePolicy-nodeLossToleration-change")],
    "hangDetection": [pytest.param(set_("hangDetection", {
        "timeoutSeconds": 300, "stragglers": {"factor": 3.0, "forSeconds": 60, "action": "Report"}}),
                 id="hangDetection-set")],
    "scheduling": [pytest.param(nested("scheduling", "partialGangTimeoutSeconds", 600), id="scheduling-change")],
}


def test_every_spec_field_has_an_update_case() -> None:
    wire_names = {field.alias or name for name, field in TrainingJobSpec.model_fields.items()}
    assert set(UPDATES) == wire_names


def mutable(field: str) -> bool:
    return any((f.alias or n) == field for n, f in TrainingJobSpec.model_fields.items()
               if n in TrainingJobSpec.MUTABLE_FIELDS)


@pytest.mark.parametrize(("field", "update"), [
    pytest.param(field, *p.values, id=p.id) for field, params in UPDATES.items() for p in params])
def test_spec_update(custom: client.CustomObjectsApi, admission_namespace: str, stored_job: dict,
                     field: str, update: Callable[[dict], None]) -> None:
    body = current(custom, admission_namespace)
    before = copy.deepcopy(body["spec"])
    update(body["spec"])
    assert body["spec"] != before  # the update really changes the spec
    if mutable(field):
        assert replace(custom, admission_namespace, body)["spec"][field] == body["spec"][field]
        return
    rejection = replace_rejected(custom, admission_namespace, body)
    assert rejection.status == 422, rejection
    # Only the field (adding elastic to this InPlace job also breaks its rule against InPlace, at spec.elastic,
    # and its rule against spares, at spec.spareNodes).
    assert set(rejection.fields) == {f"spec.{field}"} | ({"spec.spareNodes"} if field == "elastic" else set()), \
        rejection
    assert f"spec.{field} is immutable: create a new TrainingJob to change it" in rejection.message
    assert current(custom, admission_namespace)["spec"] == before


def test_reapplying_the_manifest_with_new_labels_is_accepted(kubeconfig: str, custom: client.CustomObjectsApi,
                                                             admission_namespace: str) -> None:
    # The usual kubectl flow: the manifest leaves defaulted fields out (network, successPolicy, ...),
    # and re-applying it must not count the defaults as changes; changing the image still must.
    manifest = training_job("reapplied", 2)
    apply(kubeconfig, admission_namespace, manifest)
    try:
        manifest["metadata"]["labels"] = {"stage": "eval"}
        apply(kubeconfig, admission_namespace, manifest)
        stored = custom.get_namespaced_custom_object(GROUP, VERSION, admission_namespace, PLURAL, "reapplied")
        assert stored["metadata"]["labels"] == {"stage": "eval"}
        assert stored["metadata"]["generation"] == 1

        manifest["spec"]["image"] = "registry.example/train:2.0"
        result = kubectl(kubeconfig, "apply", "-n", admission_namespace, "-f", "-", input=yaml.safe_dump(manifest),
                         check=False)
        assert result.returncode != 0, result.stdout
        assert "spec.image: Invalid value: spec.image is immutable" in result.stderr, result.stderr
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, admission_namespace, PLURAL, "reapplied")


def test_metadata_labels_stay_editable(custom: client.CustomObjectsApi, admission_namespace: str,
                                       stored_job: dict) -> None:
    body = current(custom, admission_namespace)
    body["metadata"]["labels"] = {**body["metadata"].get("labels", {}), "stage": "eval"}
    updated = replace(custom, admission_namespace, body, dry_run=False)
    assert updated["metadata"]["labels"]["stage"] == "eval"
    assert updated["metadata"]["generation"] == stored_job["metadata"]["generation"]  # spec untouched
    assert current(custom, admission_namespace)["metadata"]["labels"]["stage"] == "eval"


GANG_SCHEDULER_UPDATES = [
    pytest.param({"volcano": {"queue": "research"}}, {"volcano": {"queue": "other"}}, "volcano",
                 id="volcano-queue-change"),
    pytest.param({"volcano": {}}, {}, "volcano", id="volcano-remove"),
    pytest.param({"coscheduling": {"schedulerName": "s"}}, {"coscheduling": {"schedulerName": "s",
                                                                             "scheduleTimeoutSeconds": 5}},
                 "coscheduling", id="coscheduling-timeout-add"),
    pytest.param({}, {"coscheduling": {"schedulerName": "s"}}, "coscheduling", id="coscheduling-add"),
]


@pytest.mark.parametrize(("created", "updated", "field"), GANG_SCHEDULER_UPDATES)
def test_the_gang_scheduler_is_frozen_while_the_timeout_is_not(custom: client.CustomObjectsApi,
                                                               admission_namespace: str, created: dict,
                                                               updated: dict, field: str) -> None:
    # spec.scheduling may change (partialGangTimeoutSeconds); the gang scheduler it names may not.
    name = f"gang-{field}-{uuid.uuid4().hex[:6]}"
    body = training_job(name, 2, scheduling=copy.deepcopy(created))
    stored = create(custom, admission_namespace, body, dry_run=False)
    try:
        stored["spec"]["scheduling"]["partialGangTimeoutSeconds"] = 30
        stored = replace(custom, admission_namespace, stored, dry_run=False)
        assert stored["spec"]["scheduling"]["partialGangTimeoutSeconds"] == 30
        stored["spec"]["scheduling"] = {"partialGangTimeoutSeconds": 30, **updated}
        rejection = replace_rejected(custom, admission_namespace, stored)
        assert rejection.status == 422, rejection
        assert rejection.fields == (f"spec.scheduling.{field}",), rejection
        assert f"spec.scheduling.{field} is immutable" in rejection.message
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, admission_namespace, PLURAL, name)
