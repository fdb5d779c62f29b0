"""Hostile TrainingJobs: every one is refused at admission with a field-level message, or, once admitted,
ends with a status that says what happened, from an operator that keeps running.

1. Hand-written specs (beyond test_admission.py): wrong types, huge values, unicode and control
   characters, bad ints, empty and duplicate list items, injection-looking strings, names we use, peers'
   fields, metadata.name edge cases, malformed YAML documents.
2. Generated specs (hypothesis, derandomized): the valid maximal_job() and a small training_job() with
   one value replaced by random JSON, a required key deleted or an unknown key inserted; arbitrary JSON
   trees as spec; and specs shaped like the schema with random contents.
   Every send is a server-side dry run with fieldValidation=Strict. What "field-level" means exactly is
   in hostile.py; mutants must also name the spec field they mutated.
   Each of these tests sends its own spec and judges its own outcome: a rejection names the field, an
   admitted spec is one the operator's models accept.
3. Every admitted hand-written spec, and generated ones up to MAX_CREATED in all, are created for real
   in a namespace the session operator watches (the module fixture `hostile_runs` sends and draws them
   itself, so this and the totals pass alone and in any order): each gets a phase and a condition reason, a Failed job
   leaves no pod pending or running, a reconcile fails again and again only where the cluster forbids
   the pods (403, retried by design), the operator stays up, and its log shows no traceback from
   multinode code.
4. The totals, with a one-line summary.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from multinode.api import GROUP, PLURAL, VERSION, TrainingJob
from tests.integration.api import hostile
from tests.integration.api.hostile import Ledger, Mutant, Outcome, named_fields, names_mutated_field
from localcluster.harness.trainingjobs import training_job
from tests.support.jobs import job_pods
from localcluster.harness.operator import OperatorProcess
from localcluster.harness.waiting import wait_for

MAX_CREATED = 32
SETTLE_SECONDS = 90


# ---- hand-written cases ----------------------------------------------------------------------------


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
    for prev, name in zip("abcdefgh", "bcdefghi"):
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
    rejected("startupTimeout-zero", job(startupTimeoutSeconds=0), "spec.startupTimeoutSeconds",
             "greater than or equal to 1"),
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
    rejected("resumeFrom-job-shell", job(cache={"claimName": "c"}, checkpointing={
        "claimName": "k", "resumeFrom": {"trainingJob": "$(rm -rf /)"}}),
             "spec.checkpointing.resumeFrom.trainingJob", "should match"),
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


def test_there_are_enough_hand_written_cases() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)


def sent(custom: client.CustomObjectsApi, api: client.ApiClient, namespace: str, body: dict | str) -> Outcome:
    return hostile.send_yaml(api, namespace, body) if isinstance(body, str) else hostile.send(custom, namespace, body)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_hand_written_spec(custom: client.CustomObjectsApi, api: client.ApiClient, admission_namespace: str,
                           case: Case) -> None:
    outcome = sent(custom, api, admission_namespace, case.body)
    if case.runs is not None:
        assert outcome.admitted, f"expected the apiserver to admit it (the operator's turn): {outcome}"
        assert_models_accept(outcome)
    elif case.status is not None:
        assert outcome.status == case.status, outcome
        assert case.why in outcome.message, outcome
    else:
        assert not outcome.admitted, f"admitted: {outcome.stored}"
        fields = named_fields(outcome)
        assert any(f == case.field or f.startswith(case.field) for f in fields), (case.field, fields, outcome)
        assert case.why in outcome.message, outcome


# ---- generated -------------------------------------------------------------------------------------

GENERATED = settings(deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                            HealthCheck.data_too_large, HealthCheck.large_base_example])


def assert_models_accept(outcome: Outcome) -> None:
    """An admitted object the operator's models refuse would mean the CRD and the models disagree (the
    operator would fail it with InvalidSpec; test_admitted_hostile_specs_end_well checks that it does not)."""
    assert outcome.stored is not None
    TrainingJob.model_validate(outcome.stored)


def judge(custom: client.CustomObjectsApi, namespace: str, id_: str, body: dict,
          mutated: hostile.JsonPath | None = None) -> Outcome:
    """Send `body`: admitted, the operator's models must accept it (what the operator then makes of it is
    test_admitted_hostile_specs_end_well's); rejected, the message must name a field, the mutated one if any."""
    outcome = hostile.send(custom, namespace, body)
    if outcome.admitted:
        assert_models_accept(outcome)
        return outcome
    fields = named_fields(outcome)
    if mutated is not None:
        assert names_mutated_field(fields, mutated), f"{id_}: the rejection names {fields}, not the mutated field"
    return outcome


# Each generated kind: its source name in the totals, its strategy (of Mutants, or of specs), and how many
# examples the test draws; hostile_runs draws the same numbers again for its own ledger.
REPLACED = ("replace", st.sampled_from(sorted(hostile.BASES)).flatmap(hostile.replacements), 70)
DELETED = ("delete", hostile.deletions(), 25)
INSERTED = ("insert", hostile.insertions(), 30)
ARBITRARY = ("arbitrary", hostile.arbitrary_specs, 30)
SCHEMA_SHAPED = ("schema-shaped", hostile.schema_shaped_specs(), 40)
GENERATED_KINDS = (REPLACED, DELETED, INSERTED, ARBITRARY, SCHEMA_SHAPED)
GENERATED_SOURCES = tuple(source for source, _, _ in GENERATED_KINDS)


@settings(GENERATED, max_examples=REPLACED[2])
@given(mutant=REPLACED[1])
def test_one_value_replaced(custom: client.CustomObjectsApi, admission_namespace: str, mutant: Mutant) -> None:
    judge(custom, admission_namespace, mutant.id, mutant.body, mutant.path)


@settings(GENERATED, max_examples=DELETED[2])
@given(mutant=DELETED[1])
def test_required_key_deleted(custom: client.CustomObjectsApi, admission_namespace: str, mutant: Mutant) -> None:
    outcome = hostile.send(custom, admission_namespace, mutant.body)
    assert not outcome.admitted, f"{mutant.id}: admitted without a required field"
    fields = named_fields(outcome)
    assert hostile.render(mutant.path) in fields or names_mutated_field(fields, mutant.path), (mutant.id, fields)
    assert "Required value" in outcome.message, outcome


@settings(GENERATED, max_examples=INSERTED[2])
@given(mutant=INSERTED[1])
def test_unknown_key_inserted(custom: client.CustomObjectsApi, admission_namespace: str, mutant: Mutant) -> None:
    outcome = judge(custom, admission_namespace, mutant.id, mutant.body, mutant.path)
    # Into an object with a closed schema (not a map, not a pass-through that keeps unknown fields), an
    # unknown key is refused by strict decoding, which names it under its parent.
    parent = hostile.schema_at(mutant.path[:-1])
    if parent is not None and "properties" in parent and not parent.get("x-kubernetes-preserve-unknown-fields"):
        assert outcome.status == 400 and "unknown field" in outcome.message, outcome
        under = hostile.render(mutant.path[:-1]) + "."
        assert any(f.startswith(under) for f in named_fields(outcome)), (under, outcome)


@settings(GENERATED, max_examples=ARBITRARY[2])
@given(spec=ARBITRARY[1])
def test_arbitrary_spec(custom: client.CustomObjectsApi, admission_namespace: str, spec) -> None:
    judge(custom, admission_namespace, "arbitrary", hostile.job_with_spec(spec))


@settings(GENERATED, max_examples=SCHEMA_SHAPED[2])
@given(spec=SCHEMA_SHAPED[1])
def test_schema_shaped_spec(custom: client.CustomObjectsApi, admission_namespace: str, spec: dict) -> None:
    judge(custom, admission_namespace, "schema-shaped", hostile.job_with_spec(spec))


def sent_specs(custom: client.CustomObjectsApi, api: client.ApiClient, namespace: str) -> Ledger:
    """Every hand-written case and as many generated specs of each kind as its test draws, sent (dry run)
    and recorded: what the creation test and the totals start from, whichever of them runs, alone or not."""
    ledger = Ledger()
    for case in CASES:
        ledger.record("hand-written", case.id, case.body, sent(custom, api, namespace, case.body))
    for source, strategy, examples in GENERATED_KINDS:
        draw_into(ledger, source, strategy, examples, lambda body: hostile.send(custom, namespace, body))
    return ledger


def draw_into(ledger: Ledger, source: str, strategy: st.SearchStrategy, examples: int,
              send: Callable[[dict], Outcome]) -> None:
    @settings(GENERATED, max_examples=examples)
    @given(drawn=strategy)
    def record(drawn) -> None:
        id_, body = (drawn.id, drawn.body) if isinstance(drawn, Mutant) else (source, hostile.job_with_spec(drawn))
        ledger.record(source, id_, body, send(body))

    record()


# ---- admitted specs, created for real --------------------------------------------------------------


def creatable(body: object) -> bool:
    """Small enough for the shared cluster, and not deleted by its own TTL before we look."""
    spec = body.get("spec") if isinstance(body, dict) else None
    return (isinstance(spec, dict) and type(spec.get("numNodes")) is int and 1 <= spec["numNodes"] <= 4
            and "ttlSecondsAfterFinished" not in spec)


def chosen_for_creation(ledger: Ledger) -> list[tuple[str, hostile.Sent, Runs | None]]:
    """Every admitted hand-written case, then generated ones round-robin over their kind and base."""
    expected = {c.id: c.runs for c in CASES if c.runs is not None}
    hand = [s for s in ledger.admitted("hand-written") if s.id in expected]
    assert len(hand) <= MAX_CREATED - 8, "leave room for generated specs"
    groups: dict[str, list[hostile.Sent]] = {}
    for spec in sorted(ledger.admitted(*GENERATED_SOURCES), key=lambda s: hostile.fingerprint(s.body)):
        if creatable(spec.body):
            groups.setdefault(":".join(spec.id.split(":")[:2]), []).append(spec)
    generated: list[hostile.Sent] = []
    while len(hand) + len(generated) < MAX_CREATED and any(groups.values()):
        for _, queue in sorted(groups.items()):
            if queue and len(hand) + len(generated) < MAX_CREATED:
                generated.append(queue.pop(0))
    return ([(f"hw{i:02d}", s, expected[s.id]) for i, s in enumerate(hand)]
            + [(f"gen{i:02d}", s, None) for i, s in enumerate(generated)])


def for_real(name: str, body: dict) -> dict:
    """The admitted body under a unique name; of its metadata only labels, annotations and generateName
    (a finalizer or owner reference would outlive the test)."""
    body = copy.deepcopy(body)
    metadata = {k: v for k, v in (body.get("metadata") or {}).items()
                if k in ("labels", "annotations", "generateName")}
    if "generateName" in metadata:
        metadata["generateName"] = f"{name}-"
    else:
        metadata["name"] = name
    body["metadata"] = metadata
    return body


def problems(job: dict, pods: list, expected: Runs | None) -> str | None:
    """Why `job` is not (yet) where it must end; None once it is."""
    status = job.get("status") or {}
    phase = status.get("phase")
    if not phase:
        return "no status.phase"
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    explaining = conditions.get("Failed" if phase == "Failed" else "Running")
    if explaining is None or not explaining.get("reason"):
        return f"phase {phase} without a condition reason: {conditions}"
    if phase == "Failed":
        active = [p.metadata.name for p in pods if p.status.phase in ("Pending", "Running")
                  and not p.metadata.deletion_timestamp]
        if active:
            return f"Failed, but pods still active: {active}"
    if expected is not None and (phase, explaining["reason"]) != (expected.phase, expected.reason):
        return f"{phase}/{explaining['reason']}, expected {expected.phase}/{expected.reason}"
    if expected is not None and expected.says not in explaining.get("message", ""):
        return f"message {explaining.get('message', '')[:300]!r} does not say {expected.says!r}"
    return None


def tracebacks_in_our_code(log: str) -> list[str]:
    blocks = re.split(r"(?=Traceback \(most recent call last\):)", log)[1:]
    return [b[:3000] for b in blocks if re.search(r'File "[^"]*/multinode/', b)]


@dataclass
class HostileRuns:
    """The admitted specs created for real and settled: each name's spec and expected ending, the
    operator's log from their creation on, the jobs as they ended, and the dry-run ledger they came from."""

    ledger: Ledger
    namespace: str
    names: dict[str, tuple[hostile.Sent, Runs | None]]
    log: str
    jobs: dict[str, dict] = field(default_factory=dict)


@pytest.fixture(scope="module")
def hostile_runs(custom: client.CustomObjectsApi, api: client.ApiClient, core: client.CoreV1Api,
                 admission_namespace: str, module_job_namespace: str, operator: OperatorProcess) -> HostileRuns:
    job_namespace = module_job_namespace
    ledger = sent_specs(custom, api, admission_namespace)
    chosen = chosen_for_creation(ledger)
    log_start = operator.log_path.stat().st_size
    names: dict[str, tuple[hostile.Sent, Runs | None]] = {}
    for name, spec, expected in chosen:
        created = custom.create_namespaced_custom_object(GROUP, VERSION, job_namespace, PLURAL,
                                                         for_real(name, spec.body))
        names[created["metadata"]["name"]] = (spec, expected)

    def pending() -> dict[str, str]:
        jobs = {j["metadata"]["name"]: j for j in
                custom.list_namespaced_custom_object(GROUP, VERSION, job_namespace, PLURAL)["items"]}
        left = {}
        for name, (_, expected) in names.items():
            why = "gone" if name not in jobs else problems(jobs[name], job_pods(core, job_namespace, name), expected)
            if why:
                left[name] = why
        return left

    last: dict[str, str] = {}

    def settled() -> bool:
        nonlocal last
        last = pending()
        return not last

    try:
        wait_for(settled, timeout=SETTLE_SECONDS, what="every admitted hostile job to settle")
    except AssertionError:
        # The operator's log first and only a few jobs: CI shows the start of a failure, not all of it.
        detail = {n: (why, names[n][0].id, json.dumps(names[n][0].body)[:400]) for n, why in list(last.items())[:5]}
        raise AssertionError(f"{len(last)} jobs did not settle; operator log:\n{operator.log_tail(60)}\n"
                             f"the first of them: {json.dumps(detail, indent=1)}") from None

    assert operator.proc is not None and operator.proc.poll() is None, f"operator exited:\n{operator.log_tail()}"
    with open(operator.log_path, encoding="utf-8", errors="replace") as f:
        f.seek(log_start)
        runs = HostileRuns(ledger, job_namespace, names, f.read())
    runs.jobs = {j["metadata"]["name"]: j for j in
                 custom.list_namespaced_custom_object(GROUP, VERSION, job_namespace, PLURAL)["items"]}
    for name in names:
        status = runs.jobs[name]["status"]
        conditions = {c["type"]: c for c in status["conditions"]}
        reason = (conditions.get("Failed") if status["phase"] == "Failed" else conditions["Running"])["reason"]
        ledger.runtime[name] = f"{status['phase']}/{reason}"

    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, job_namespace, PLURAL)
    wait_for(lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, job_namespace, PLURAL)["items"],
             timeout=60, what="hostile jobs deleted")
    return runs


def test_admitted_hostile_specs_end_well(hostile_runs: HostileRuns) -> None:
    assert hostile_runs.names, "no admitted spec was created"
    assert not tracebacks_in_our_code(hostile_runs.log), tracebacks_in_our_code(hostile_runs.log)
    for name, (spec, _) in hostile_runs.names.items():
        conditions = {c["type"]: c for c in hostile_runs.jobs[name]["status"]["conditions"]}
        reason = hostile_runs.ledger.runtime[name].split("/")[1]
        # A stored object the operator's models refuse would mean the CRD and the models disagree.
        assert reason != "InvalidSpec", (spec.id, conditions["Failed"]["message"])
        if reason == "PodCreationFailed":
            assert re.search(r"\b(spec|metadata)\.", conditions["Failed"]["message"]), conditions["Failed"]
        # The worker retries only what the cluster may still allow (403); anything else failing a
        # reconcile again and again is a handler that cannot cope with the job.
        retried = hostile_runs.log.count(f"reconcile of {hostile_runs.namespace}/{name} failed")
        assert retried == 0 or reason == "PodCreationForbidden", (spec.id, retried, reason)


# ---- totals ----------------------------------------------------------------------------------------


def test_totals(hostile_runs: HostileRuns, capsys: pytest.CaptureFixture) -> None:
    ledger = hostile_runs.ledger
    assert {s.source for s in ledger.sent.values()} == {"hand-written", *GENERATED_SOURCES}
    assert ledger.runtime, "no admitted spec was created"
    sent_ = list(ledger.sent.values())
    hand = sum(s.source == "hand-written" for s in sent_)
    rejected_ = sum(not s.outcome.admitted for s in sent_)
    phases = [v.split("/")[0] for v in ledger.runtime.values()]
    failed = phases.count("Failed")
    by_outcome: dict[str, int] = {}
    for value in ledger.runtime.values():
        by_outcome[value] = by_outcome.get(value, 0) + 1
    admitted_by_source = {source: len(ledger.admitted(source)) for source in ("hand-written", *GENERATED_SOURCES)}
    summary = (f"hostile specs: {len(sent_)} sent ({hand} hand-written, {len(sent_) - hand} generated); "
               f"{rejected_} rejected at admission, {len(sent_) - rejected_} admitted {admitted_by_source}; "
               f"{len(phases)} created: {failed} admitted-and-failed, {len(phases) - failed} admitted-and-running "
               f"(not failed; {phases.count('Running')} Running); {dict(sorted(by_outcome.items()))}")
    with capsys.disabled():
        print(f"\n{summary}")
    assert len(sent_) >= 200, summary
    assert hand >= 60 and len(sent_) - hand >= 150, summary
