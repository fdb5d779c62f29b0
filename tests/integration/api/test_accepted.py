"""The CRD is not over-strict: valid TrainingJobs, from minimal to every field set, are accepted as sent.

Also checks the CRD itself: the apiserver accepted it (structural schema, every CEL rule compiled and
within the cost budget) and serves exactly the committed schema.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from multinode.api import CRD_NAME
from multinode.api.spec import TrainingJobSpec
from tests.integration.api.admission import create, maximal_job
from multinode.testing import training_job
from localcluster.harness.kube import kubectl


def committed_schema(crd_file: str) -> dict[str, Any]:
    crd = yaml.safe_load(Path(crd_file).read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def missing_fields(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Declared properties that `value` does not set (for lists: that no item sets)."""
    if schema.get("type") == "array":
        items = value or []
        item_schema = schema["items"]
        per_item = [set(missing_fields(item, item_schema, f"{path}[]")) for item in items]
        return sorted(set.intersection(*per_item)) if per_item else [f"{path}[]"]
    missing = []
    for name, prop in schema.get("properties", {}).items():
        if name not in value:
            missing.append(f"{path}.{name}")
        else:
            missing.extend(missing_fields(value[name], prop, f"{path}.{name}"))
    return missing


def test_minimal_job_is_accepted_and_defaulted(custom: client.CustomObjectsApi, admission_namespace: str) -> None:
    body = training_job("m", 1, gpus=None, command=None, image="busybox")
    stored = create(custom, admission_namespace, body, strict=True)
    assert stored["spec"] == {
        "numNodes": 1,
        "spareNodes": 0,
        "image": "busybox",
        "resourcesPerNode": {"gpus": 0, "gpuResourceName": "nvidia.com/gpu"},
        "network": {"rendezvousPort": 29500, "hostNetwork": False},
        "successPolicy": "AllNodes",
        "podTemplate": {"automountServiceAccountToken": False},
        "failurePolicy": {"maxRestarts": 3,
                          "backoff": {"initialSeconds": 5, "maxSeconds": 300}, "nodeLossTolerationSeconds": 5},
        "suspend": False,
        "cleanPodPolicy": "Running",
        "imageConsistency": {"pinDigest": True, "onMismatch": "FailAttempt"},
        "healthCheck": {"enabled": True, "gpus": True, "rdma": True, "shm": True,
                        "memlockFloorBytes": 68719476736, "exclusionSeconds": 3600},
        "scheduling": {"partialGangTimeoutSeconds": 120, "nativePodGroup": True},
        "startupTimeoutSeconds": 1800,
    }


def test_maximal_job_sets_every_field_of_the_crd(crd: str) -> None:
    spec_schema = committed_schema(crd)["properties"]["spec"]
    # resumeFrom takes one of trainingJob and path; a named gang scheduler excludes podGroup and
    # podTemplate.schedulerName; elastic excludes InPlace (which spares need): VALID below covers them.
    assert missing_fields(maximal_job("x")["spec"], spec_schema, "spec") == [
        "spec.elastic", "spec.checkpointing.resumeFrom.path", "spec.scheduling.volcano",
        "spec.scheduling.coscheduling"]


def test_maximal_job_is_accepted_as_sent(custom: client.CustomObjectsApi, admission_namespace: str) -> None:
    body = maximal_job("maximal")
    stored = create(custom, admission_namespace, copy.deepcopy(body), strict=True)
    # Strict decoding: no field unknown to the schema; equality: nothing pruned, nothing defaulted over.
    assert stored["spec"] == body["spec"]


VALID = [
    pytest.param(training_job("a" * 61, 10), id="name-61-numNodes-10"),  # "<name>-9" is exactly 63
    pytest.param(training_job("a" * 61, 1), id="name-61-numNodes-1"),
    pytest.param(training_job("a" * 60, 100), id="name-60-numNodes-100"),
    pytest.param(training_job("j", 1), id="name-one-letter"),
    pytest.param(training_job("resume", 1, cache={"claimName": "c"}, checkpointing={
        "claimName": "k", "resumeFrom": {"path": "/checkpoints/other/checkpoint-100"}}), id="resumeFrom-path"),
    pytest.param(training_job("job-2-b", 1000), id="numNodes-1000"),
    pytest.param(training_job("job-2-c", 20000), id="numNodes-20000"),  # the cap: the status stays bounded
    pytest.param(training_job("cpu", 2, gpus=0, numProcPerNode=1), id="cpu-only"),
    pytest.param(training_job("port", 2, network={"rendezvousPort": 1}), id="rendezvousPort-1"),
    pytest.param(training_job("port", 2, network={"rendezvousPort": 65535}), id="rendezvousPort-65535"),
    *[pytest.param(training_job("q", 2, resourcesPerNode={"cpu": q, "memory": q}, shmSize=q), id=f"quantity-{q}")
      for q in ("500m", "1.5", ".5", "1e3", "64Gi", "128M", "0")],
    pytest.param(training_job("env", 2, env=[{"name": n, "value": "1"} for n in
                                             ("MASTER_ADDR_OVERRIDE", "master_addr", "NCCL_IB_TIMEOUT", "RANK")]),
                 id="env-names-near-reserved"),
    pytest.param(training_job("fieldref", 2, env=[{"name": "POD_IP",
                                                   "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]),
                 id="env-valueFrom-only"),
    pytest.param(training_job("vol", 2, podTemplate={
        "volumes": [{"name": "shm", "emptyDir": {}}],
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm2"}, {"name": "shm", "mountPath": "/dev"}]}),
        id="volumes-near-dev-shm"),
    pytest.param(training_job("tol", 2, podTemplate={"tolerations": [{"operator": "Exists"}]}),
                 id="toleration-match-all"),
    pytest.param(training_job("labels", 2, podTemplate={"labels": {"empty": "", "a": "A_b.c-1"}}),
                 id="label-values-edge"),
    pytest.param(training_job("volcano", 2, scheduling={"volcano": {"queue": "research.a-1", "schedulerName": "vc"}}),
                 id="volcano-every-field"),
    # The issue's own example: numNodes 3, elastic 2..3; and the name as long as '<name>-rdzv' allows.
    pytest.param(training_job("elastic", 3, elastic={"minNodes": 2, "maxNodes": 3, "belowMinTimeoutSeconds": 300,
                                                     "resizeWindowSeconds": 20}), id="elastic-every-field"),
    pytest.param(training_job("e" * 58, 3, elastic={"minNodes": 1}), id="elastic-name-58"),
    # Spares with the restart strategy unset: the operator then chooses InPlace (reconcile/restart_strategy.py).
    pytest.param(training_job("spares", 2, spareNodes=1), id="spareNodes-restartStrategy-unset"),
    pytest.param(training_job("cosched", 2, scheduling={"coscheduling": {
        "schedulerName": "scheduler-plugins-scheduler", "scheduleTimeoutSeconds": 60}}), id="coscheduling-every-field"),
]


@pytest.mark.parametrize("body", VALID)
def test_valid_spec_is_accepted(custom: client.CustomObjectsApi, admission_namespace: str, body: dict) -> None:
    stored = create(custom, admission_namespace, copy.deepcopy(body), strict=True)
    assert stored["metadata"]["name"] == body["metadata"]["name"]
    for key, value in body["spec"].items():
        if isinstance(value, dict):  # nested defaults may be added next to what was sent
            assert stored["spec"][key] | value == stored["spec"][key], key
        else:
            assert stored["spec"][key] == value, key


def served_crd(api: client.ApiClient) -> dict[str, Any]:
    response = client.ApiextensionsV1Api(api).read_custom_resource_definition(CRD_NAME, _preload_content=False)
    return json.loads(response.data)


def test_crd_is_established_with_a_structural_schema(api: client.ApiClient, crd: str) -> None:
    conditions = {c["type"]: c for c in served_crd(api)["status"]["conditions"]}
    assert conditions["Established"]["status"] == "True", conditions
    assert conditions["NamesAccepted"]["status"] == "True", conditions
    assert "NonStructuralSchema" not in conditions, conditions["NonStructuralSchema"]
    assert "Terminating" not in conditions, conditions


def test_apiserver_serves_the_committed_schema_with_every_cel_rule(api: client.ApiClient, crd: str) -> None:
    (version,) = served_crd(api)["spec"]["versions"]
    served, committed = version["schema"]["openAPIV3Schema"], committed_schema(crd)
    assert served == committed

    def rules(node: Any) -> int:
        if isinstance(node, dict):
            return len(node.get("x-kubernetes-validations", [])) + sum(rules(v) for v in node.values())
        return sum(rules(v) for v in node) if isinstance(node, list) else 0

    immutable = len(TrainingJobSpec.model_fields) - len(TrainingJobSpec.MUTABLE_FIELDS)
    # One transition rule per immutable spec field, plus: job name, env name reserved,
    # env value/valueFrom, volume name dshm, mount path /dev/shm, checkpointing needs cache,
    # distinct cache/checkpoint mount paths, resumeFrom one-of, a failure rule sets a matcher; and the gang
    # scheduler's five: podGroup or a gang scheduler, podTemplate.schedulerName or one, volcano or
    # coscheduling, each of them frozen; a seccomp or AppArmor profile names a localhostProfile exactly when
    # its type is Localhost, in the pod's and the trainer's security context (four); no multinode.dev/
    # podTemplate annotation (the operator's own); spareNodes needs InPlace (or unset), at most numNodes,
    # and not with elastic.
    assert rules(served) == immutable + 25


def test_committed_crd_compiles_within_the_cel_cost_budget(kubeconfig: str, crd: str) -> None:
    # The apiserver compiles every rule and estimates its worst-case cost on each CRD write;
    # a rule that does not compile or may cost too much fails this dry run with the rule's path.
    result = kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", crd,
                     check=False)
    assert result.returncode == 0, result.stderr
    assert "serverside-applied (server dry run)" in result.stdout

