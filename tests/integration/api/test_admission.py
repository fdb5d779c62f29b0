"""Invalid TrainingJobs are rejected by the real apiserver, with a message naming the field and the reason.

Every case is a server-side dry run (create with dryRun=All): the apiserver runs the whole admission
chain (decoding, OpenAPI schema, CEL rules) and stores nothing.
"""

from __future__ import annotations

import copy

import pytest
import yaml
from kubernetes import client

from tests.integration.api.admission import create, create_rejected
from multinode.testing import training_job
from localcluster.harness.kube import kubectl

NAME_61 = "a" * 61  # "<name>-9" is 63 characters: fits with numNodes 10, not with 11


def job(**spec) -> dict:
    return training_job("job", 2, **spec)


def without(body: dict, *path: str) -> dict:
    body = copy.deepcopy(body)
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return body


def with_env(*env: dict) -> dict:
    return job(env=[{"name": "DATA_DIR", "value": "/data"}, *env])


def case(id_: str, body: dict, field: str, why: str, *, status: int = 422, strict: bool = False):
    return pytest.param(body, field, why, status, strict, id=id_)


INVALID = [
    # hang detection: a timeout a poll of the logs could not tell from latency, and each straggler knob
    case("hang-timeout-5", job(hangDetection={"timeoutSeconds": 5}), "spec.hangDetection.timeoutSeconds",
         "greater than or equal to 10"),
    case("hang-timeout-missing", job(hangDetection={}), "spec.hangDetection.timeoutSeconds", "Required value"),
    case("straggler-factor-1", job(hangDetection={"timeoutSeconds": 60, "stragglers": {"factor": 1}}),
         "spec.hangDetection.stragglers.factor", "should be greater than 1"),
    case("straggler-action-Restart", job(hangDetection={"timeoutSeconds": 60, "stragglers": {"action": "Restart"}}),
         "spec.hangDetection.stragglers.action", 'Unsupported value: "Restart"'),
    # the collective bandwidth test: a floor, a bounded buffer, a bounded time
    case("collective-minGbps-zero", job(healthCheck={"collectiveBandwidth": {"minGbps": 0}}),
         "spec.healthCheck.collectiveBandwidth.minGbps", "should be greater than 0"),
    case("collective-minGbps-missing", job(healthCheck={"collectiveBandwidth": {"sizeMiB": 8}}),
         "spec.healthCheck.collectiveBandwidth.minGbps", "Required value"),
    case("collective-sizeMiB-4096", job(healthCheck={"collectiveBandwidth": {"minGbps": 10, "sizeMiB": 4096}}),
         "spec.healthCheck.collectiveBandwidth.sizeMiB", "less than or equal to 1024"),
    case("collective-timeout-1", job(healthCheck={"collectiveBandwidth": {"minGbps": 10, "timeoutSeconds": 1}}),
         "spec.healthCheck.collectiveBandwidth.timeoutSeconds", "greater than or equal to 5"),
    # counts and ranges
    case("numNodes-zero", training_job("job", 0), "spec.numNodes", "greater than or equal to 1"),
    case("numNodes-negative", training_job("job", -3), "spec.numNodes", "greater than or equal to 1"),
    case("numNodes-missing", without(job(), "spec", "numNodes"), "spec.numNodes", "Required value"),
    case("numProcPerNode-zero", job(numProcPerNode=0), "spec.numProcPerNode", "greater than or equal to 1"),
    case("spareNodes-BlockingRecreate", job(spareNodes=1, failurePolicy={"restartStrategy": "BlockingRecreate"}),
         "spec.spareNodes", "needs spec.failurePolicy.restartStrategy InPlace (or unset)"),
    case("spareNodes-Recreate", job(spareNodes=1, failurePolicy={"restartStrategy": "Recreate"}), "spec.spareNodes",
         "needs spec.failurePolicy.restartStrategy InPlace"),
    case("spareNodes-beyond-numNodes", job(spareNodes=3, failurePolicy={"restartStrategy": "InPlace"}),
         "spec.spareNodes", "at most spec.numNodes"),
    case("spareNodes-negative", job(spareNodes=-1), "spec.spareNodes", "greater than or equal to 0"),
    case("name-61-with-spares", training_job("a" * 61, 2, spareNodes=2, failurePolicy={"restartStrategy": "InPlace"}),
         "metadata.name", "fits 63 characters"),
    case("elastic-minNodes-beyond-numNodes", job(elastic={"minNodes": 3}), "spec.elastic.minNodes",
         "at most spec.numNodes"),
    case("elastic-maxNodes-not-numNodes", job(elastic={"minNodes": 1, "maxNodes": 4}), "spec.elastic.maxNodes",
         "must equal spec.numNodes"),
    case("elastic-minNodes-zero", job(elastic={"minNodes": 0}), "spec.elastic.minNodes", "greater than or equal to 1"),
    case("elastic-spareNodes", job(elastic={"minNodes": 1}, spareNodes=1), "spec.spareNodes",
         "spec.elastic cannot be combined with spec.spareNodes"),
    case("elastic-InPlace", job(elastic={"minNodes": 1}, failurePolicy={"restartStrategy": "InPlace"}),
         "spec.elastic", "cannot be combined with failurePolicy.restartStrategy InPlace"),
    case("elastic-window-negative", job(elastic={"minNodes": 1, "resizeWindowSeconds": -1}),
         "spec.elastic.resizeWindowSeconds", "greater than or equal to 0"),
    case("name-59-elastic", training_job("a" * 59, 2, elastic={"minNodes": 1}), "metadata.name",
         "fits 63 characters"),
    case("gpus-negative", job(resourcesPerNode={"gpus": -1}), "spec.resourcesPerNode.gpus",
         "greater than or equal to 0"),
    case("rdma-count-zero", job(network={"rdma": {"count": 0}}), "spec.network.rdma.count",
         "greater than or equal to 1"),
    case("rendezvousPort-zero", job(network={"rendezvousPort": 0}), "spec.network.rendezvousPort",
         "greater than or equal to 1"),
    case("rendezvousPort-70000", job(network={"rendezvousPort": 70000}), "spec.network.rendezvousPort",
         "less than or equal to 65535"),
    # enums
    case("successPolicy-Any", job(successPolicy="Any"), "spec.successPolicy", 'Unsupported value: "Any"'),
    case("imagePullPolicy-Sometimes", job(imagePullPolicy="Sometimes"), "spec.imagePullPolicy",
         'Unsupported value: "Sometimes"'),
    case("nccl-debug-LOUD", job(network={"nccl": {"debug": "LOUD"}}), "spec.network.nccl.debug",
         'Unsupported value: "LOUD"'),
    case("toleration-operator-In", job(podTemplate={"tolerations": [{"key": "gpu", "operator": "In"}]}),
         "spec.podTemplate.tolerations[0].operator", 'Unsupported value: "In"'),
    # image
    case("image-missing", without(job(), "spec", "image"), "spec.image", "Required value"),
    case("image-empty", job(image=""), "spec.image", "at least 1 chars long"),
    # quantities and label values
    case("cpu-lots", job(resourcesPerNode={"gpus": 8, "cpu": "lots"}), "spec.resourcesPerNode.cpu", "should match"),
    case("memory-negative", job(resourcesPerNode={"gpus": 8, "memory": "-1"}), "spec.resourcesPerNode.memory",
         "should match"),
    case("shmSize-64GB", job(shmSize="64GB"), "spec.shmSize", "should match"),
    case("accelerator-empty", job(accelerator=""), "spec.accelerator", "at least 1 chars long"),
    case("pod-label-value", job(podTemplate={"labels": {"team": "-ml-"}}), "spec.podTemplate.labels.team",
         "should match"),
    case("gpuResourceName-two-slashes", job(resourcesPerNode={"gpuResourceName": "nvidia.com/gpu/a100"}),
         "spec.resourcesPerNode.gpuResourceName", "should match"),
    # job name: our CEL rule (DNS-1035, room for "-<index>") and the apiserver's own check
    case("name-starts-with-digit", training_job("1job", 2), "metadata.name", "must be a DNS-1035 label"),
    case("name-with-dot", training_job("my.job", 2), "metadata.name", "must be a DNS-1035 label"),
    case("name-uppercase", training_job("Llama", 2), "metadata.name", "lowercase RFC 1123"),
    case("name-61-numNodes-11", training_job(NAME_61, 11), "metadata.name", "fits 63 characters"),
    case("name-62-numNodes-1", training_job("a" * 62, 1), "metadata.name", "fits 63 characters"),
    # env
    *[case(f"env-reserved-{name}", with_env({"name": name, "value": "x"}), "spec.env[1].name",
           f"{name} is reserved")
      for name in ("MASTER_ADDR", "WORLD_SIZE", "PET_NODE_RANK", "BT_NODE_RANK", "NCCL_DEBUG")],
    case("env-duplicate-name", with_env({"name": "DATA_DIR", "value": "/other"}), "spec.env[1]", "Duplicate value"),
    case("env-value-and-valueFrom",
         with_env({"name": "POD", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
         "spec.env[1]", "value and valueFrom are mutually exclusive"),
    case("env-empty-name", with_env({"name": "", "value": "x"}), "spec.env[1].name", "at least 1 chars long"),
    # volumes: /dev/shm belongs to multinode
    case("volume-named-dshm", job(podTemplate={"volumes": [{"name": "dshm", "emptyDir": {}}]}),
         "spec.podTemplate.volumes[0].name", "'dshm' is reserved"),
    case("volume-duplicate-name",
         job(podTemplate={"volumes": [{"name": "data", "emptyDir": {}}, {"name": "data", "emptyDir": {}}]}),
         "spec.podTemplate.volumes[1]", "Duplicate value"),
    case("mount-dev-shm", job(podTemplate={"volumeMounts": [{"name": "data", "mountPath": "/dev/shm"}]}),
         "spec.podTemplate.volumeMounts[0].mountPath", "/dev/shm is reserved"),
    case("mount-dev-shm-slash", job(podTemplate={"volumeMounts": [{"name": "data", "mountPath": "/dev/shm/"}]}),
         "spec.podTemplate.volumeMounts[0].mountPath", "/dev/shm is reserved"),
    # network
    case("multus-name-with-comma", job(network={"multusNetworks": ["ib-a,ib-b"]}),
         "spec.network.multusNetworks[0]", "should match"),
    # unknown fields: pruned by default, rejected under fieldValidation=Strict (kubectl's default)
    case("unknown-spec-field-strict", job(numGPUs=8), 'unknown field "spec.numGPUs"', "strict decoding error",
         status=400, strict=True),
    case("unknown-nested-field-strict", job(network={"rdma": {"cnt": 2}}), 'unknown field "spec.network.rdma.cnt"',
         "strict decoding error", status=400, strict=True),
    case("spec-missing", without(job(), "spec"), "spec", "Required value"),
    # cache and checkpointing
    case("checkpointing-without-cache", job(checkpointing={"claimName": "ckpt"}),
         "spec.checkpointing", "requires spec.cache"),
    case("checkpointing-same-mount-as-cache",
         job(cache={"claimName": "c", "mountPath": "/data"}, checkpointing={"claimName": "k", "mountPath": "/data"}),
         "spec.checkpointing.mountPath", "must differ from spec.cache.mountPath"),
    case("resumeFrom-both", job(cache={"claimName": "c"}, checkpointing={
        "claimName": "k", "resumeFrom": {"trainingJob": "a", "path": "/checkpoints/a/b"}}),
         "spec.checkpointing.resumeFrom", "exactly one of trainingJob and path"),
    case("resumeFrom-neither", job(cache={"claimName": "c"}, checkpointing={"claimName": "k", "resumeFrom": {}}),
         "spec.checkpointing.resumeFrom", "exactly one of trainingJob and path"),
    case("checkpoint-keep-zero", job(cache={"claimName": "c"}, checkpointing={"claimName": "k", "keep": 0}),
         "spec.checkpointing.keep", "greater than or equal to 1"),
    case("checkpoint-completion-unknown",
         job(cache={"claimName": "c"}, checkpointing={"claimName": "k", "completion": "pickle"}),
         "spec.checkpointing.completion", "Unsupported value"),
    case("cache-relative-mount", job(cache={"claimName": "c", "mountPath": "cache"}),
         "spec.cache.mountPath", "should match"),
    case("cache-claim-uppercase", job(cache={"claimName": "Team_Cache"}), "spec.cache.claimName", "should match"),
]


@pytest.mark.parametrize(("body", "field", "why", "status", "strict"), INVALID)
def test_invalid_spec_is_rejected(custom: client.CustomObjectsApi, admission_namespace: str,
                                  body: dict, field: str, why: str, status: int, strict: bool) -> None:
    rejection = create_rejected(custom, admission_namespace, body, strict=strict)
    assert rejection.status == status, rejection
    assert rejection.names(field), f"message does not name {field}: {rejection}"
    assert why in rejection.message, rejection


def test_unknown_field_is_pruned_without_strict_validation(custom: client.CustomObjectsApi,
                                                           admission_namespace: str) -> None:
    stored = create(custom, admission_namespace, job(numGPUs=8, network={"rdma": {"cnt": 2}}))
    assert "numGPUs" not in stored["spec"]
    assert stored["spec"]["network"]["rdma"] == {"count": 1, "resourceName": "rdma/hca_shared_devices_a",
                                                 "ipcLock": True}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(with_env({"name": "MASTER_ADDR", "value": "x"}),
                     "spec.env[1].name: Invalid value: \"MASTER_ADDR\": spec.env: MASTER_ADDR is reserved",
                     id="reserved-env"),
        pytest.param(job(numGPUs=8), 'unknown field "spec.numGPUs"', id="unknown-field"),
        pytest.param(training_job(NAME_61, 11), "metadata.name: Invalid value", id="name-too-long"),
    ],
)
def test_kubectl_shows_the_field_and_the_reason(kubeconfig: str, admission_namespace: str, body: dict,
                                                expected: str) -> None:
    # What a user sees: kubectl apply validates strictly by default and prints the apiserver's message.
    result = kubectl(kubeconfig, "apply", "--dry-run=server", "-n", admission_namespace, "-f", "-",
                     input=yaml.safe_dump(body), check=False)
    assert result.returncode != 0, result.stdout
    assert expected in result.stderr, result.stderr

