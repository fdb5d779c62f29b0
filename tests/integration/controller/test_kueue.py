"""Queued through a real Kueue: the operator is the TrainingJob's Kueue integration (integrations/kueue/).

A Kueue v0.17 controller manager (tools/localcluster/build.sh kueue, cached by version) runs as a local
process (localcluster.harness.kueue says how, without writing outside its work dir). A ClusterQueue has GPU
quota for one 4-node job on one ResourceFlavor whose nodeLabels pick zone `zone-a` (4 of the 8 kwok nodes). Two
4-node jobs are queued: Kueue admits the first, the operator unsuspends it and its pods select the flavor's
nodes; the second waits suspended with no pod until the first has succeeded and its Workload is Finished,
then runs.

The module has an operator of its own, started after Kueue's CRDs are installed (the operator asks once,
at start, whether Kueue is served), and removes Kueue's CRDs at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from localcluster.harness.kube import new_namespace
from localcluster.harness.kueue import KueueProcess
from localcluster.harness.operator import OperatorProcess
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from tests.support import jobs
from tests.support.jobs import FINISH_AFTER

KUEUE = ("kueue.x-k8s.io", "v1beta2")
ZONE = "topology.kubernetes.io/zone"
PREFIX = "kq"


@pytest.fixture(scope="module")
def kueue_operator(kubeconfig: str, kueue: KueueProcess,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    op = OperatorProcess(kubeconfig, [f"{PREFIX}-*"], Path(tmp_path_factory.mktemp("kueue-operator")) / "operator.log")
    op.start()
    yield op
    op.stop()


@pytest.fixture
def queue(core: client.CoreV1Api, custom: client.CustomObjectsApi, kueue_operator: OperatorProcess) -> Iterator[str]:
    """A namespace with LocalQueue `gpus` → a ClusterQueue with quota for 4 nodes' GPUs on flavor zone-a."""
    ns = new_namespace(core, prefix=PREFIX)
    suffix = uuid.uuid4().hex[:6]
    flavor, cluster_queue = f"zone-a-{suffix}", f"gpus-{suffix}"
    group, version = KUEUE
    custom.create_cluster_custom_object(group, version, "resourceflavors", {
        "apiVersion": f"{group}/{version}", "kind": "ResourceFlavor", "metadata": {"name": flavor},
        "spec": {"nodeLabels": {ZONE: "zone-a"}}})
    custom.create_cluster_custom_object(group, version, "clusterqueues", {
        "apiVersion": f"{group}/{version}", "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": "100"}, {"name": "memory", "nominalQuota": "100Gi"},
                {"name": "nvidia.com/gpu", "nominalQuota": "32"}]}]}]}})
    custom.create_namespaced_custom_object(group, version, ns, "localqueues", {
        "apiVersion": f"{group}/{version}", "kind": "LocalQueue", "metadata": {"name": "gpus"},
        "spec": {"clusterQueue": cluster_queue}})

    def active() -> bool:
        cq = custom.get_cluster_custom_object(group, version, "clusterqueues", cluster_queue)
        conditions = (cq.get("status") or {}).get("conditions", [])
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    # Kueue may still be starting its controllers on CRDs another module just installed again (conftest.kueue).
    wait_for(active, timeout=90, what=f"ClusterQueue {cluster_queue} Active")
    yield ns
    core.delete_namespace(ns)
    # The namespace's Workloads go with it (owner references); then the queue and flavor can go.
    wait_for(lambda: not custom.list_namespaced_custom_object(group, version, ns, "workloads")["items"],
             timeout=60, what="Workloads deleted")
    custom.delete_cluster_custom_object(group, version, "clusterqueues", cluster_queue)
    custom.delete_cluster_custom_object(group, version, "resourceflavors", flavor)


def queued_job(name: str, finish_after: str) -> dict:
    manifest = training_job(name, 4, suspend=True, pod_annotations={FINISH_AFTER: finish_after})
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpus"}
    return manifest


def workload(custom: client.CustomObjectsApi, ns: str, job: str) -> dict | None:
    items = custom.list_namespaced_custom_object(*KUEUE, ns, "workloads",
                                                 label_selector=f"multinode.dev/job-name={job}")["items"]
    return items[0] if items else None


def condition(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), {})


def test_two_jobs_over_one_jobs_quota_run_one_after_the_other(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, queue: str,
    kueue_operator: OperatorProcess,
) -> None:
    ns = queue
    jobs.apply(kubeconfig, ns, queued_job("first", "8s"))
    # The namespace is new: the job is planned once the operator's watches there have listed (milliseconds).
    try:
        wait_for(lambda: workload(custom, ns, "first"), timeout=30, what="first's Workload")
    except AssertionError as e:
        status = (jobs.get_job(custom, ns, "first") or {}).get("status")
        raise AssertionError(f"{e}\njob status: {status}\noperator log:\n{kueue_operator.log_tail(60)}") from None
    jobs.apply(kubeconfig, ns, queued_job("second", "1s"))

    # Kueue admits the first; the operator unsuspends it, and its pods run on the flavor's nodes.
    first = jobs.wait_phase(custom, ns, "first", "Running", timeout=60)
    assert first["spec"]["suspend"] is False
    assert condition(first, "KueueAdmitted")["reason"] == "AdmittedByKueue"
    wl = workload(custom, ns, "first")
    assert wl is not None
    assert wl["metadata"]["ownerReferences"][0]["name"] == "first"
    assert wl["metadata"]["ownerReferences"][0]["controller"] is True
    assert wl["spec"]["podSets"][0]["count"] == 4
    assert wl["spec"]["queueName"] == "gpus"
    pods = jobs.job_pods(core, ns, "first")
    assert len(pods) == 4
    assert all(p.spec.node_selector.get(ZONE) == "zone-a" for p in pods)
    nodes = {n.metadata.name: n.metadata.labels for n in core.list_node().items}
    assert all(nodes[p.spec.node_name][ZONE] == "zone-a" for p in pods)

    # The second does not fit beside it: suspended, no pod, queued in Kueue.
    second = jobs.get_job(custom, ns, "second")
    assert second["status"]["phase"] == "Suspended"
    assert condition(second, "KueueAdmitted")["reason"] == "QueuedInKueue"
    assert jobs.job_pods(core, ns, "second") == []
    second_wl = workload(custom, ns, "second")
    assert second_wl is not None and not (second_wl.get("status") or {}).get("admission")

    # The first succeeds; its Workload is Finished, which frees the quota; the second is admitted and runs.
    jobs.wait_phase(custom, ns, "first", "Succeeded", timeout=60)
    wait_for(lambda: condition(workload(custom, ns, "first") or {}, "Finished").get("status") == "True",
             timeout=30, what="first's Workload Finished")
    assert condition(workload(custom, ns, "first") or {}, "Finished")["reason"] == "Succeeded"
    assert jobs.job_pods(core, ns, "second") == [] or jobs.get_job(custom, ns, "second")["spec"]["suspend"] is False
    second = jobs.wait_phase(custom, ns, "second", "Succeeded", timeout=60)
    assert second["status"]["attempt"] == 0 and second["status"]["uncountedRestarts"] == 0
    assert condition(second, "KueueAdmitted")["reason"] == "AdmittedByKueue"
