"""The health GitOps tools read, on jobs the operator reconciled on the real apiserver. kstatus, the rules of
Flux (sigs.k8s.io/cli-utils, run as tools/localcluster/kstatus): Pending, Running and a spec change not yet
observed read as InProgress, Succeeded and Suspended as Current, Failed as Failed. Argo CD's health check
(docs/gitops/argocd/..., run in a Lua runtime as Argo CD runs it): Progressing, Healthy, Suspended, Degraded."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from kubernetes import client
from lupa import LuaRuntime

from localcluster import binaries
from localcluster.harness.kube import kubectl, new_namespace
from localcluster.harness.waiting import wait_for
from multinode.api import GROUP, PLURAL, VERSION
from multinode.testing import training_job
from tests.support import jobs
from tests.support.jobs import FINISH_AFTER
from tests.support.paths import DOCS

ARGOCD_HEALTH = DOCS / "gitops" / "argocd" / "resource_customizations" / "multinode.dev" / "TrainingJob" / "health.lua"


def kstatus(kubeconfig: str, namespace: str, *names: str) -> dict[str, dict]:
    """kstatus' verdict on each job named, read from the apiserver as Flux reads it."""
    listed = kubectl(kubeconfig, "get", "-n", namespace, f"{PLURAL}.{GROUP}", *names, "-o", "json").stdout
    out = subprocess.run([str(binaries.kstatus())], input=listed, capture_output=True, text=True, check=True)
    return {v["name"]: v for v in map(json.loads, out.stdout.splitlines())}


def argocd_health(obj: dict) -> tuple[str, str]:
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(ARGOCD_HEALTH.read_text())
    return result["status"], result["message"]


def test_kstatus_and_argocd_read_each_phase_of_a_reconciled_job(custom: client.CustomObjectsApi, kubeconfig: str,
                                                      job_namespace: str) -> None:
    ns = job_namespace
    bodies = {
        "waits": training_job("waits", 1, gpus=1, podTemplate={"nodeSelector": {"no-such-label": "x"}}),
        "runs": training_job("runs", 1, gpus=1),
        "done": training_job("done", 1, gpus=1, pod_annotations={FINISH_AFTER: "1s"}),
        "late": training_job("late", 1, gpus=1, activeDeadlineSeconds=2),
        "held": training_job("held", 1, gpus=1, suspend=True),
    }
    for body in bodies.values():
        jobs.apply(kubeconfig, ns, body)
    phases = {"waits": "Pending", "runs": "Running", "done": "Succeeded", "late": "Failed", "held": "Suspended"}
    for name, phase in phases.items():
        jobs.wait_phase(custom, ns, name, phase, timeout=60)

    def settled() -> dict[str, dict] | None:
        # The phase and the conditions are written in one status patch; read again until kstatus agrees
        # with every phase (a job read between two of its patches may still be one phase behind).
        got = kstatus(kubeconfig, ns, *phases)
        want = {"waits": "InProgress", "runs": "InProgress", "done": "Current", "late": "Failed", "held": "Current"}
        return got if {n: v["status"] for n, v in got.items()} == want else None

    got = wait_for(settled, timeout=30, what="kstatus to read every phase")
    late = jobs.get_job(custom, ns, "late")
    assert got["late"]["message"] == jobs.condition(late, "Failed")["message"], got["late"]
    assert jobs.condition(late, "Stalled")["reason"] == "DeadlineExceeded"
    assert got["waits"]["message"].startswith("Pending: "), got["waits"]
    assert got["runs"]["message"].startswith("Running: "), got["runs"]
    done = jobs.get_job(custom, ns, "done")
    assert (jobs.condition(done, "Ready")["status"], jobs.condition(done, "Ready")["reason"]) == \
        ("True", "AllNodesSucceeded")
    # What users alert on keeps its meaning: Running, Failed, Succeeded are there as before.
    assert jobs.condition(late, "Failed")["status"] == "True"
    assert jobs.condition(done, "Succeeded")["status"] == "True"

    argocd = {name: argocd_health(jobs.get_job(custom, ns, name))[0] for name in phases}
    assert argocd == {"waits": "Progressing", "runs": "Healthy", "done": "Healthy", "late": "Degraded",
                      "held": "Suspended"}

    # A mutable field changed: once the operator has seen it, observedGeneration follows and the job reads as
    # its phase says again.
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "runs", {"spec": {"activeDeadlineSeconds": 3600}})
    observed = wait_for(lambda: (job := jobs.get_job(custom, ns, "runs"))["status"].get("observedGeneration") == 2
                        and job, timeout=30, what="the operator to observe generation 2")
    assert observed["metadata"]["generation"] == 2
    assert all(c["observedGeneration"] == 2 for c in observed["status"]["conditions"]
               if c["type"] in ("Ready", "Reconciling", "Stalled"))
    assert kstatus(kubeconfig, ns, "runs")["runs"]["status"] == "InProgress"


@pytest.fixture
def unwatched_namespace(core: client.CoreV1Api) -> Iterator[str]:
    """A namespace no operator watches (the session operator's watch only namespaces named `t-*`)."""
    name = new_namespace(core, prefix="kstatus")
    yield name
    core.delete_namespace(name)


def test_a_job_or_a_spec_change_the_operator_has_not_observed_reads_in_progress(
        custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str, unwatched_namespace: str) -> None:
    namespace = unwatched_namespace
    # A job that succeeded, its status written by the operator; then the same object and status in a namespace
    # no operator watches, where a spec change stays unobserved for as long as the test looks.
    jobs.apply(kubeconfig, job_namespace, training_job("done", 1, gpus=1, pod_annotations={FINISH_AFTER: "1s"}))
    status = jobs.wait_phase(custom, job_namespace, "done", "Succeeded")["status"]
    jobs.apply(kubeconfig, namespace, training_job("done", 1, gpus=1, pod_annotations={FINISH_AFTER: "1s"}))
    # Before any operator wrote its status, the CRD's default says generation 0 was observed: InProgress, where
    # an object with no status at all would read Current (Flux would call a job healthy before it started).
    unseen = kstatus(kubeconfig, namespace, "done")["done"]
    assert unseen == {"namespace": namespace, "name": "done", "status": "InProgress",
                      "message": "TrainingJob generation is 1, but latest observed generation is 0"}, unseen
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "done", {"status": status})
    assert kstatus(kubeconfig, namespace, "done")["done"]["status"] == "Current"

    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "done",
                                          {"spec": {"ttlSecondsAfterFinished": 600}})
    verdict = kstatus(kubeconfig, namespace, "done")["done"]
    assert verdict["status"] == "InProgress", verdict
    assert verdict["message"] == "TrainingJob generation is 2, but latest observed generation is 1", verdict
