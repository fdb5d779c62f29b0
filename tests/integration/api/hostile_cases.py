"""The hand-written hostile TrainingJobs of test_hostile_specs.py: each is rejected naming a field, refused
for the whole document, or admitted with what the operator must make of it (`Runs`)."""

from __future__ import annotations

from dataclasses import dataclass

from multinode.testing import training_job
from tests.integration.api import hostile

@dataclass(frozen=True)
class Runs:
    """What the operator must make of an admitted spec: the phase, and the reason of the condition that
    explains it (Failed for a failed job, else Running), whose message contains `says`."""

    phase: str
    reason: str
    says: str = ""


RUNS = Runs("Running", "AllNodesRunning")


def refused_pod(says: str) -> Runs:
    return Runs("Failed", "PodCreationFailed", says)


@dataclass(frozen=True)
class Case:
    id: str
    body: dict | str  # str: a raw YAML document
    field: str | None = None  # rejected: a field the message must name
    why: str = ""  # and a fragment of the message
    status: int | None = None  # rejected for the whole document (no field to name), with this status
    runs: Runs | None = None  # admitted


def rejected(id_: str, body: dict | str, field: str, why: str = "") -> Case:
    return Case(id_, body, field=field, why=why)


def refused(id_: str, body: dict | str, status: int, why: str) -> Case:
    return Case(id_, body, status=status, why=why)


def admitted(id_: str, body: dict, runs: Runs) -> Case:
    return Case(id_, body, runs=runs)


def job(**spec) -> dict:
    """Two CPU-only nodes: admitted cases must fit the fake nodes whatever else runs."""
    return training_job("job", 2, gpus=0, **spec)


def named(name: str, num_nodes: int = 1, **spec) -> dict:
    return training_job(name, num_nodes, gpus=0, **spec)


def with_metadata(metadata: dict, **spec) -> dict:
    return {**job(**spec), "metadata": metadata}


def without_key(body: dict, key: str) -> dict:
    return {k: v for k, v in body.items() if k != key}


def nested(depth: int) -> dict:
    node: dict = {}
    for _ in range(depth):
        node = {"a": node}
    return node


def template(**fields) -> dict:
    return {"podTemplate": fields}


YAML_HEAD = "apiVersion: multinode.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: job}\n"


def billion_laughs() -> str:
    lines = ['  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"  {name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    affinity = "\n".join("      " + line for line in lines)
    return YAML_HEAD + "spec:\n  numNodes: 1\n  image: x\n  podTemplate:\n    affinity:\n" + affinity + "\n"


ENV_ON_POD = "spec.containers[0].env["
CASES = [
    # wrong types
    rejected("numNodes-string", job(numNodes="4"), "spec.numNodes", "must be of type integer"),
    rejected("numNodes-float", job(numNodes=2.5), "spec.numNodes", "must be of type integer"),
    rejected("numNodes-integral-float", job(numNodes=2.0), "metadata.name", hostile.FLOAT_QUIRK),
    rejected("numNodes-bool", job(numNodes=True), "spec.numNodes", "must be of type integer"),
    rejected("numNodes-null", job(numNodes=None), "spec.numNodes", "Required value"),
    rejected("numNodes-list", job(numNodes=[2]), "spec.numNodes", "must be of type integer"),
    rejected("numNodes-object", job(numNodes={"value": 2}), "spec.numNodes.value", "unknown field"),
    rejected("image-int", job(image=5), "spec.image", "must be of type string"),
    rejected("image-list", job(image=["busybox"]), "spec.image", "must be of type string"),
    rejected("image-null", job(image=None), "spec.image", "Required value"),
    rejected("command-string", job(command="torchrun train.py"), "spec.command", "must be of type array"),
    rejected("command-object", job(command={"0": "torchrun"}), "spec.command.0", "unknown field"),
    rejected("command-ints", job(command=[1, 2]), "spec.command[0]", "must be of type string"),
    rejected("args-null-item", job(args=["--lr", None]), "spec.args[1]", "must be of type string"),
    rejected("env-object", job(env={"A": "b"}), "spec.env.A", "unknown field"),
    rejected("env-item-string", job(env=["A=b"]), "spec.env[0]", "must be of type object"),
    rejected("env-value-int", job(env=[{"name": "A", "value": 5}]), "spec.env[0].value", "must be of type string"),
    rejected("resourcesPerNode-list", job(resourcesPerNode=[]), "spec.resourcesPerNode", "must be of type object"),
    rejected("gpus-string", job(resourcesPerNode={"gpus": "8"}), "spec.resourcesPerNode.gpus", "of type integer"),
    rejected("cpu-int", job(resourcesPerNode={"cpu": 32}), "spec.resourcesPerNode.cpu", "must be of type string"),
    rejected("network-string", job(network="host"), "spec.network", "must be of type object"),
    rejected("hostNetwork-string", job(network={"hostNetwork": "true"}), "spec.network.hostNetwork",
             "must be of type boolean"),
    rejected("multus-string", job(network={"multusNetworks": "ib-a"}), "spec.network.multusNetworks",
             "must be of type array"),
    rejected("rendezvousPort-string", job(network={"rendezvousPort": "29500"}), "spec.network.rendezvousPort",
             "must be of type integer"),
    rejected("podTemplate-list", job(podTemplate=[]), "spec.podTemplate", "must be of type object"),
    rejected("labels-list", job(**template(labels=["team=ml"])), "spec.podTemplate.labels", "must be of type object"),
    rejected("label-value-int", job(**template(labels={"team": 1})), "spec.podTemplate.labels.team",
             "must be of type string"),
    rejected("tolerations-object", job(**template(tolerations={"key": "gpu"})), "spec.podTemplate.tolerations.key",
             "unknown field"),
    rejected("affinity-list", job(**template(affinity=[])), "spec.podTemplate.affinity", "must be of type object"),
    rejected("suspend-string", job(suspend="yes"), "spec.suspend", "must be of type boolean"),
    rejected("successPolicy-int", job(successPolicy=1), "spec.successPolicy", "must be of type string"),
    rejected("metadata-labels-list", with_metadata({"name": "job", "labels": ["a"]}), "metadata.labels",
             "cannot unmarshal array"),
    rejected("metadata-name-int", with_metadata({"name": 5}), "metadata.name", "cannot unmarshal number"),
    # huge values
    rejected("numNodes-1e9", job(numNodes=10**9), "spec.numNodes", "less than or equal to"),
    rejected("numNodes-20001", job(numNodes=20001), "spec.numNodes", "less than or equal to 20000"),
    rejected("numNodes-2^63", job(numNodes=2**63), "spec.numNodes", "must be of type integer"),
    rejected("numNodes-minus-2^63", job(numNodes=-(2**63)), "spec.numNodes", "greater than or equal to 1"),
    rejected("gpus-2^63", job(resourcesPerNode={"gpus": 2**63}), "spec.resourcesPerNode.gpus", "of type integer"),
    rejected("rendezvousPort-65536", job(network={"rendezvousPort": 65536}), "spec.network.rendezvousPort",
             "less than or equal to 65535"),
    rejected("image-70k", job(image="a" * 70_000), "spec.image", "Too long"),
    rejected("command-item-70k", job(command=["x" * 70_000]), "spec.command[0]", "Too long"),
    rejected("env-10k", job(env=[{"name": f"E{i}", "value": "x"} for i in range(10_000)]), "spec.env",
             "must have at most 512 items"),
    rejected("env-value-70k", job(env=[{"name": "A", "value": "v" * 70_000}]), "spec.env[0].value", "Too long"),
    rejected("annotation-value-300k", job(**template(annotations={"a": "v" * 300_000})),
             "spec.podTemplate.annotations.a", "Too long"),
    rejected("labels-100", job(**template(labels={f"l{i}": "v" for i in range(100)})), "spec.podTemplate.labels",
             "must have at most 64 items"),
    rejected("backoff-huge", job(failurePolicy={"backoff": {"initialSeconds": 3601}}),
             "spec.failurePolicy.backoff.initialSeconds", "less than or equal to 3600"),
    rejected("exit-code-256",
             job(failurePolicy={"rules": [{"action": "FailJob", "onExitCodes": [{"min": 1, "max": 256}]}]}),
             "spec.failurePolicy.rules[0].onExitCodes[0].max", "less than or equal to 255"),
    # negative, zero
    rejected("numProcPerNode-negative", job(numProcPerNode=-1), "spec.numProcPerNode", "greater than or equal to 1"),
    rejected("rdma-count-negative", job(network={"rdma": {"count": -5}}), "spec.network.rdma.count",
             "greater than or equal to 1"),
    rejected("rendezvousPort-negative", job(network={"rendezvousPort": -1}), "spec.network.rendezvousPort",
             "greater than or equal to 1"),
    rejected("maxRestarts-negative", job(failurePolicy={"maxRestarts": -1}), "spec.failurePolicy.maxRestarts",
             "greater than or equal to 0"),
    rejected("activeDeadline-zero", job(activeDeadlineSeconds=0), "spec.activeDeadlineSeconds",
             "greater than or equal to 1"),
    rejected("ttl-negative", job(ttlSecondsAfterFinished=-1), "spec.ttlSecondsAfterFinished",
             "greater than or equal to 0"),
    rejected("startupTimeout-negative", job(startupTimeoutSeconds=-1), "spec.startupTimeoutSeconds",
             "greater than or equal to 0"),
    rejected("partialGangTimeout-zero", job(scheduling={"partialGangTimeoutSeconds": 0}),
             "spec.scheduling.partialGangTimeoutSeconds", "greater than or equal to 1"),
    # a named gang scheduler: one of them, one gang, one place for the scheduler's name
    rejected("volcano-and-coscheduling", job(scheduling={"volcano": {}, "coscheduling": {"schedulerName": "s"}}),
             "spec.scheduling", "name one gang scheduler"),
    rejected("volcano-with-podGroup", job(podGroup={"minMember": 2}, scheduling={"volcano": {}}),
             "spec.podGroup", "cannot be combined with spec.scheduling.volcano"),
    rejected("coscheduling-with-podTemplate-schedulerName",
             job(podTemplate={"schedulerName": "other"}, scheduling={"coscheduling": {"schedulerName": "s"}}),
             "spec.podTemplate.schedulerName", "cannot be combined with a gang scheduler"),
    rejected("coscheduling-no-schedulerName", job(scheduling={"coscheduling": {}}),
             "spec.scheduling.coscheduling.schedulerName", "Required value"),
    rejected("volcano-queue-uppercase", job(scheduling={"volcano": {"queue": "Research"}}),
             "spec.scheduling.volcano.queue", "should match"),
    rejected("coscheduling-timeout-zero", job(scheduling={"coscheduling": {"schedulerName": "s",
                                                                           "scheduleTimeoutSeconds": 0}}),
             "spec.scheduling.coscheduling.scheduleTimeoutSeconds", "greater than or equal to 1"),
    # empty objects and lists where items are required
    rejected("spec-empty", job() | {"spec": {}}, "spec.numNodes", "Required value"),
    rejected("env-empty-item", job(env=[{}]), "spec.env[0].name", "Required value"),
    rejected("rule-empty", job(failurePolicy={"rules": [{}]}), "spec.failurePolicy.rules[0].action", "Required value"),
    rejected("rule-no-matcher", job(failurePolicy={"rules": [{"action": "FailJob"}]}), "spec.failurePolicy.rules[0]",
             "sets at least one of"),
    rejected("rule-empty-exit-codes", job(failurePolicy={"rules": [{"action": "FailJob", "onExitCodes": []}]}),
             "spec.failurePolicy.rules[0].onExitCodes", "at least 1 items"),
    rejected("pull-secret-empty", job(**template(imagePullSecrets=[{}])), "spec.podTemplate.imagePullSecrets[0].name",
             "Required value"),
    rejected("volume-without-name", job(**template(volumes=[{"emptyDir": {}}])), "spec.podTemplate.volumes[0].name",
             "Required value"),
    rejected("mount-empty", job(**template(volumeMounts=[{}])), "spec.podTemplate.volumeMounts[0]", "Required value"),
    rejected("topology-empty", job(topology={}), "spec.topology.sameDomainLabel", "Required value"),
    rejected("cache-empty", job(cache={}), "spec.cache.claimName", "Required value"),
    rejected("multus-empty-name", job(network={"multusNetworks": [""]}), "spec.network.multusNetworks[0]",
             "at least 1 chars long"),
    # duplicate list-map keys
    rejected("env-duplicate-first-and-third",
             job(env=[{"name": "A", "value": "1"}, {"name": "B", "value": "1"}, {"name": "A", "value": "2"}]),
             "spec.env[2]", "Duplicate value"),
    rejected("pull-secret-duplicate", job(**template(imagePullSecrets=[{"name": "r"}, {"name": "r"}])),
             "spec.podTemplate.imagePullSecrets[1]", "Duplicate value"),
    rejected("mount-path-duplicate", job(**template(volumeMounts=[{"name": "a", "mountPath": "/data"},
                                                                  {"name": "b", "mountPath": "/data"}])),
             "spec.podTemplate.volumeMounts[1]", "Duplicate value"),
    refused("yaml-duplicate-key", YAML_HEAD + "spec:\n  numNodes: 1\n  numNodes: 2\n  image: x\n", 400,
            'key "numNodes" already set in map'),
    # unicode and control characters
    rejected("name-unicode", named("jöb"), "metadata.name", "RFC 1123"),
    rejected("name-newline", named("job\n"), "metadata.name", "RFC 1123"),
    rejected("name-nul", named("job\x00"), "metadata.name", "RFC 1123"),
    rejected("name-right-to-left-override", named("job\u202e"), "metadata.name", "RFC 1123"),
    rejected("metadata-label-key-control", with_metadata({"name": "job", "labels": {"a\x00": "b"}}),
             "metadata.labels", "name part must consist of"),
    rejected("metadata-label-value-unicode", with_metadata({"name": "job", "labels": {"team": "ü"}}),
             "metadata.labels", "a valid label must be"),
    rejected("pod-label-value-emoji", job(**template(labels={"team": "\U0001F680"})), "spec.podTemplate.labels.team",
             "should match"),
    rejected("accelerator-unicode", job(accelerator="NVIDIA-H100-80GB-HBM3\u200b"), "spec.accelerator",
             "should match"),
    rejected("multus-space", job(network={"multusNetworks": ["ib a"]}), "spec.network.multusNetworks[0]",
             "should match"),
    rejected("multus-newline", job(network={"multusNetworks": ["ib-a\nib-b"]}), "spec.network.multusNetworks[0]",
             "should match"),
    rejected("quantity-newline", job(shmSize="64Gi\n"), "spec.shmSize", "should match"),
    rejected("volume-name-uppercase", job(**template(volumes=[{"name": "DSHM", "emptyDir": {}}])),
             "spec.podTemplate.volumes[0].name", "should match"),
    # injection-looking strings where they are not free text
    rejected("name-shell", named("job;rm"), "metadata.name", "RFC 1123"),
    rejected("gpuResourceName-template", job(resourcesPerNode={"gpuResourceName": "{{ .gpu }}"}),
             "spec.resourcesPerNode.gpuResourceName", "should match"),
    rejected("claim-name-sql", job(cache={"claimName": "x'; DROP TABLE pvcs; --"}), "spec.cache.claimName",
             "should match"),
    # names the operator puts into a request path (priorityClassName: it reads the PriorityClass for Kueue)
    rejected("priority-class-path", job(**template(priorityClassName="../../api/v1/namespaces/kube-system/secrets/x")),
             "spec.podTemplate.priorityClassName", "should match"),
    rejected("service-account-uppercase", job(**template(serviceAccountName="Trainer")),
             "spec.podTemplate.serviceAccountName", "should match"),
    rejected("scheduler-name-slash", job(**template(schedulerName="default/scheduler")),
             "spec.podTemplate.schedulerName", "should match"),
    rejected("resumeFrom-job-shell", job(cache={"claimName": "c"}, checkpointing={
        "claimName": "k", "resumeFrom": {"trainingJob": "$(rm -rf /)"}}),
             "spec.checkpointing.resumeFrom.trainingJob", "should match"),
    rejected("pod-annotation-of-the-operator", job(**template(annotations={"multinode.dev/attempt": "9"})),
             "spec.podTemplate.annotations", "the operator's own"),
    rejected("env-reserved-after-valueFrom", job(env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
                                                      {"name": "MASTER_PORT", "value": "$(A)"}]),
             "spec.env[1].name", "MASTER_PORT is reserved"),
    # fields of other CRDs
    rejected("kubeflow-pytorchReplicaSpecs", job(pytorchReplicaSpecs={"Master": {"replicas": 1}}),
             "spec.pytorchReplicaSpecs", "unknown field"),
    rejected("kubeflow-runPolicy", job(runPolicy={"cleanPodPolicy": "All"}), "spec.runPolicy", "unknown field"),
    rejected("kubeflow-v2-trainer", job(trainer={"numNodes": 2, "image": "x"}), "spec.trainer", "unknown field"),
    rejected("jobset-replicatedJobs", job(replicatedJobs=[{"name": "w", "replicas": 2}]), "spec.replicatedJobs",
             "unknown field"),
    rejected("pod-template-spec", job(**template(spec={"containers": []})), "spec.podTemplate.spec", "unknown field"),
    rejected("replicas", job(replicas=4), "spec.replicas", "unknown field"),
    # metadata.name edge cases
    rejected("name-empty", named(""), "metadata.name", "name or generateName is required"),
    rejected("name-missing", with_metadata({}), "metadata.name", "name or generateName is required"),
    rejected("name-254", named("a" * 254), "metadata.name", "no more than 253"),
    rejected("name-63-one-node", named("a" * 63), "metadata.name", "fits 63 characters"),
    rejected("name-leading-dash", named("-job"), "metadata.name", "RFC 1123"),
    rejected("name-trailing-dash", named("job-"), "metadata.name", "RFC 1123"),
    rejected("name-underscore", named("job_1"), "metadata.name", "RFC 1123"),
    # whole documents the apiserver cannot read as a TrainingJob at all: nothing field-level to say
    refused("yaml-billion-laughs", billion_laughs(), 400, "excessive aliasing"),
    refused("yaml-truncated", YAML_HEAD + "spec:\n  numNodes: 1\n  command: [\n", 400, "did not find expected"),
    refused("request-4MB", job(**template(annotations={f"k{i}": "v" * 200_000 for i in range(20)})), 413,
            "Request entity too large"),
    refused("namespace-mismatch", with_metadata({"name": "job", "namespace": "other"}), 400,
            "does not match the namespace"),
    refused("apiVersion-kubeflow", job() | {"apiVersion": "kubeflow.org/v1"}, 400, "does not match the expected"),
    refused("top-level-unknown-field", job() | {"replicaSpecs": {"Worker": {"replicas": 2}}}, 400,
            'unknown field "replicaSpecs"'),
    refused("kind-missing", without_key(job(), "kind"), 400, "'Kind' is missing"),
    # admitted: the apiserver refuses the pod, and the job fails saying so
    admitted("env-name-unicode", job(env=[{"name": "ÄÖ", "value": "x"}]), refused_pod(ENV_ON_POD)),
    admitted("env-name-newline", job(env=[{"name": "A\nB", "value": "x"}]), refused_pod(ENV_ON_POD)),
    admitted("image-trailing-space", job(image="busybox "), refused_pod("spec.containers[0].image")),
    admitted("pod-annotation-key-70k", job(**template(annotations={"a" * 70_000: "x"})),
             refused_pod("metadata.annotations")),
    admitted("pod-label-key-70k", job(**template(labels={"b" * 70_000: "x"})), refused_pod("metadata.labels")),
    admitted("pod-annotations-over-256k", job(**template(annotations={f"k{i}": "v" * 100_000 for i in range(3)})),
             refused_pod("metadata.annotations: Too long")),
    admitted("volume-named-like-ours", job(cache={"claimName": "c"},
                                           **template(volumes=[{"name": "multinode-cache", "emptyDir": {}}])),
             refused_pod("spec.volumes[")),
    admitted("mount-over-our-cache", job(cache={"claimName": "c"}, **template(
        volumes=[{"name": "data", "emptyDir": {}}], volumeMounts=[{"name": "data", "mountPath": "/cache"}])),
             refused_pod("mountPath")),
    admitted("mount-unknown-volume", job(**template(volumeMounts=[{"name": "nope", "mountPath": "/x"}])),
             refused_pod("volumeMounts[")),
    admitted("toleration-seconds-without-NoExecute", job(**template(tolerations=[
        {"key": "a", "operator": "Exists", "tolerationSeconds": 5}])), refused_pod("tolerations[0]")),
    # passed through unchecked by the CRD; the apiserver's decoder (wrong shape) or its strict field
    # validation (unknown field; the operator creates with fieldValidation=Strict) refuses them
    admitted("volume-source-garbage", job(**template(volumes=[{"name": "v", "hostPath": 5}])),
             refused_pod("spec.volumes.VolumeSource.hostPath")),
    admitted("affinity-nested-200", job(**template(affinity=nested(200))), refused_pod("spec.affinity.a")),
    admitted("valueFrom-unknown-source", job(env=[{"name": "A", "valueFrom": {"vaultRef": {"path": "x"}}}]),
             refused_pod("valueFrom.vaultRef")),
    # admitted, forbidden by the cluster (not the spec): the job stays Pending and says why
    admitted("priority-class-missing", job(**template(priorityClassName="does-not-exist")),
             Runs("Pending", "PodCreationForbidden", "no PriorityClass with name does-not-exist")),
    # admitted and, odd as it looks, valid: runs normally
    admitted("command-shell-injection", job(command=["$(rm -rf /)"], args=["'; DROP TABLE jobs; --"]), RUNS),
    admitted("env-value-template", job(env=[{"name": "T", "value": "{{ .Values.secret }} ${HOME} $(MASTER_ADDR)"}]),
             RUNS),
    admitted("nccl-value-with-newline", job(network={"nccl": {"socketIfname": "net1\nNCCL_DEBUG=TRACE"}}), RUNS),
    admitted("image-unicode", job(image="registry.example/träin:1.0"), RUNS),
    # Kubernetes takes any printable ASCII but "=" in env names (RelaxedEnvironmentVariableValidation)
    admitted("env-name-shell", job(env=[{"name": "$(rm -rf /)", "value": "x"}]), RUNS),
    admitted("numProcPerNode-2^31", job(numProcPerNode=2**31), RUNS),
    admitted("activeDeadline-max-int64", job(activeDeadlineSeconds=2**63 - 1), RUNS),
    admitted("command-empty-list", job(command=[], args=[""]), RUNS),
    admitted("status-sent-on-create", job() | {"status": {"phase": "Succeeded", "restarts": -5}}, RUNS),
    admitted("generate-name", {**job(), "metadata": {"generateName": "hostile-"}}, RUNS),
]
