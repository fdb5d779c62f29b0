"""A TrainingJob applied with kubectl becomes a gang of pods that find each other, and its status says so."""

from __future__ import annotations

import pytest
from kubernetes import client

from multinode.api import LABEL_ATTEMPT, LABEL_JOB_NAME, LABEL_NODE_INDEX
from multinode.testing import training_job
from tests.support import jobs
from tests.support.jobs import EXIT_CODE, FINISH_AFTER, START_AFTER
from localcluster.harness.kube import kubectl
from localcluster.harness.waiting import wait_for


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def env_of(core: client.CoreV1Api, pod) -> dict[str, str | None]:
    return jobs.pod_env(core, pod)


def test_four_node_job_runs_to_success_with_the_full_contract(
    api: client.ApiClient, core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    manifest = training_job(
        "llm", 4, gpus=8, numProcPerNode=8, shmSize="64Gi",
        network={"rdma": {"resourceName": "rdma/hca_shared_devices_a", "count": 1}},
        # Pods take 2 s to start (like an image pull) so the Starting phase is observable.
        pod_annotations={START_AFTER: "2s"},
    )
    with jobs.PhaseRecorder(api, ns, "llm") as recorder:
        jobs.apply(kubeconfig, ns, manifest)
        job = jobs.wait_phase(custom, ns, "llm", "Running", timeout=60)

        pods = sorted(jobs.job_pods(core, ns, "llm"), key=lambda p: int(p.metadata.labels[LABEL_NODE_INDEX]))
        assert [p.metadata.name for p in pods] == [f"llm-{i}-a0" for i in range(4)]
        master = f"llm-0.llm.{ns}.svc"
        for i, pod in enumerate(pods):
            assert pod.metadata.labels[LABEL_JOB_NAME] == "llm"
            assert pod.metadata.labels[LABEL_ATTEMPT] == "0"
            assert pod.spec.hostname == f"llm-{i}" and pod.spec.subdomain == "llm"
            assert pod.spec.restart_policy == "Never"
            [owner] = pod.metadata.owner_references
            assert (owner.kind, owner.name, owner.uid, owner.controller) == (
                "TrainingJob", "llm", job["metadata"]["uid"], True)
            limits = pod.spec.containers[0].resources.limits
            assert limits["nvidia.com/gpu"] == "8" and limits["rdma/hca_shared_devices_a"] == "1"
            assert pod.spec.containers[0].security_context.capabilities.add == ["IPC_LOCK"]
            assert core.read_node(pod.spec.node_name).metadata.annotations["kwok.x-k8s.io/node"] == "fake"
            env = env_of(core, pod)
            assert env["NODE_RANK"] == env["PET_NODE_RANK"] == env["BT_NODE_RANK"] == str(i)
            assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == env["BT_LEADER_ADDR"] == master
            assert (env["NNODES"], env["NPROC_PER_NODE"], env["WORLD_SIZE"], env["MASTER_PORT"]) == (
                "4", "8", "32", "29500")
            assert pod.spec.init_containers[0].command == ["multinode", "preflight"]
        # Every pod ran on its own node: 8 GPUs and 1 RDMA device fill a fake node.
        assert len({p.spec.node_name for p in pods}) == 4

        svc = core.read_namespaced_service("llm", ns)
        assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses is True
        assert svc.spec.selector == {LABEL_JOB_NAME: "llm"}
        assert svc.metadata.owner_references[0].uid == job["metadata"]["uid"]
        assert job["status"]["ready"] == "4/4"
        assert [n["node"] for n in job["status"]["nodeStatuses"]] == [p.spec.node_name for p in pods]

        for pod in pods:  # the training processes exit 0
            core.patch_namespaced_pod(pod.metadata.name, ns, {"metadata": {"annotations": {FINISH_AFTER: "0s"}}})
        done = kubectl(kubeconfig, "wait", "-n", ns, "--for=condition=Succeeded", "--timeout=60s", "trainingjob/llm")
        assert "condition met" in done.stdout
    # The first status is written once the operator sees the pods it created (reconcile/first_status.py):
    # Pending if they are not all bound to nodes by then, else already Starting.
    assert recorder.phases in (["Pending", "Starting", "Running", "Succeeded"], ["Starting", "Running", "Succeeded"])
    job = jobs.get_job(custom, ns, "llm")
    assert job["status"]["completionTime"] >= job["status"]["startTime"]
    assert jobs.condition(job, "Succeeded")["reason"] == "AllNodesSucceeded"
    # The operator writes status only: no kopf bookkeeping annotations on the user's object.
    assert not [k for k in job["metadata"].get("annotations", {}) if "kopf" in k]


def test_a_failed_pod_fails_the_job_naming_pod_exit_code_and_reason(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    # No restarts left, so the first failure is the job's (restarts: test_lifecycle.py).
    jobs.apply(kubeconfig, ns, training_job("crashy", 2, failurePolicy={"maxRestarts": 0}))
    jobs.wait_phase(custom, ns, "crashy", "Running")

    core.patch_namespaced_pod("crashy-1-a0", ns, {"metadata": {"annotations": {FINISH_AFTER: "0s", EXIT_CODE: "3"}}})

    job = jobs.wait_phase(custom, ns, "crashy", "Failed")
    failed = jobs.condition(job, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "RestartLimitExceeded"
    assert "crashy-1-a0" in failed["message"] and "exit code 3" in failed["message"] and "Error" in failed["message"]
    # The healthy worker does not keep its GPUs after the job failed.
    wait_for(lambda: all(p.metadata.deletion_timestamp or p.status.phase != "Running"
                         for p in jobs.job_pods(core, ns, "crashy")), timeout=30, what="crashy-0-a0 stopped")


def test_deleting_the_job_removes_its_pods_and_service(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    jobs.apply(kubeconfig, ns, training_job("short-lived", 3))
    jobs.wait_phase(custom, ns, "short-lived", "Running")
    assert len(jobs.job_pods(core, ns, "short-lived")) == 3

    kubectl(kubeconfig, "delete", "-n", ns, "trainingjob/short-lived", "--wait=true")

    # The real garbage collector follows our owner references.
    wait_for(lambda: jobs.job_pods(core, ns, "short-lived") == [], timeout=60, what="pods garbage-collected")
    wait_for(lambda: not [s for s in core.list_namespaced_service(ns).items if s.metadata.name == "short-lived"],
             timeout=60, what="service garbage-collected")


def test_a_node_pod_is_deleted_with_the_jobs_grace_period(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    """podTemplate.terminationGracePeriodSeconds reaches the pods through the CRD, and the apiserver gives their
    deletion that grace (what the kubelet waits between SIGTERM and SIGKILL)."""
    ns = job_namespace
    jobs.apply(kubeconfig, ns, training_job("graceful", 2, podTemplate={"terminationGracePeriodSeconds": 7}))
    jobs.wait_phase(custom, ns, "graceful", "Running")
    pod = jobs.job_pods(core, ns, "graceful")[0]
    assert pod.spec.termination_grace_period_seconds == 7
    deleted = core.delete_namespaced_pod(pod.metadata.name, ns)
    assert deleted.metadata.deletion_grace_period_seconds == 7
