"""Gang restarts, node loss, suspend, deadlines, TTL, same image everywhere, one topology domain."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from localcluster import LocalCluster

from multinode.api import GROUP, LABEL_ATTEMPT, PLURAL, VERSION
from multinode.testing import training_job
from tests.support import jobs
from tests.support.jobs import EXIT_CODE, FINISH_AFTER, START_AFTER
from tests.support.nodepools import on_pool, own_pool
from localcluster.harness.waiting import wait_for

FAST = {"backoff": {"initialSeconds": 0}}
DIGEST = "localcluster.multinode.dev/image-digest"


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def finish(core: client.CoreV1Api, ns: str, pod: str, exit_code: int = 0) -> None:
    annotations = {FINISH_AFTER: "0s", EXIT_CODE: str(exit_code)}
    core.patch_namespaced_pod(pod, ns, {"metadata": {"annotations": annotations}})


def attempt_pods(core: client.CoreV1Api, ns: str, name: str, attempt: int) -> list:
    return [p for p in jobs.job_pods(core, ns, name) if p.metadata.labels[LABEL_ATTEMPT] == str(attempt)]


def env_of(core: client.CoreV1Api, pod) -> dict[str, str | None]:
    return jobs.pod_env(core, pod)


def wait_attempt_running(custom, ns: str, name: str, attempt: int) -> dict:
    def probe():
        job = jobs.get_job(custom, ns, name)
        status = job.get("status") or {}
        return job if status.get("attempt") == attempt and status.get("phase") == "Running" else None
    return wait_for(probe, timeout=60, what=f"{name} attempt {attempt} Running")


def test_retryable_failure_restarts_the_gang_and_the_next_attempt_resumes(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    jobs.apply(kubeconfig, ns, training_job("retry", 2, failurePolicy=FAST))
    jobs.wait_phase(custom, ns, "retry", "Running")

    finish(core, ns, "retry-1-a0", exit_code=1)

    job = wait_attempt_running(custom, ns, "retry", 1)
    status = job["status"]
    assert (status["restarts"], status.get("uncountedRestarts", 0)) == (1, 0)
    [record] = status["restartHistory"]
    assert record["reason"] == "PodFailed" and "retry-1-a0" in record["message"] and record["counted"]
    pods = attempt_pods(core, ns, "retry", 1)
    assert sorted(p.metadata.name for p in pods) == ["retry-0-a1", "retry-1-a1"]
    assert {env_of(core, p)["MULTINODE_RESTART_COUNT"] for p in pods} == {"1"}
    assert {env_of(core, p)["BT_RETRY_COUNT"] for p in pods} == {"1"}
    # The whole old gang is gone (the failed pod stays for its logs; nothing of attempt 0 runs).
    assert all(p.status.phase != "Running" for p in attempt_pods(core, ns, "retry", 0))
    # The digest attempt 0 ran is pinned for attempt 1: same code on every node, every attempt.
    assert status["imageDigest"].endswith("@sha256:" + "0" * 63 + "1")
    assert {p.spec.containers[0].image for p in pods} == {status["imageDigest"]}
    reasons = [e.reason for e in core.list_namespaced_event(ns, field_selector="involvedObject.name=retry").items]
    assert "Restarting" in reasons


def test_permanent_exit_code_fails_at_once_and_a_spent_budget_names_the_last_failure(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    permanent = {**FAST, "rules": [{"action": "FailJob", "onExitCodes": [{"min": 42, "max": 42}]}]}
    jobs.apply(kubeconfig, ns, training_job("perm", 2, failurePolicy=permanent))
    jobs.apply(kubeconfig, ns, training_job("budget", 2, failurePolicy={**FAST, "maxRestarts": 1}))
    jobs.wait_phase(custom, ns, "perm", "Running")
    jobs.wait_phase(custom, ns, "budget", "Running")

    finish(core, ns, "perm-0-a0", exit_code=42)
    finish(core, ns, "budget-1-a0", exit_code=1)
    wait_attempt_running(custom, ns, "budget", 1)
    finish(core, ns, "budget-0-a1", exit_code=7)

    perm = jobs.wait_phase(custom, ns, "perm", "Failed")
    assert jobs.condition(perm, "Failed")["reason"] == "PodFailed" and perm["status"]["restarts"] == 0
    budget = jobs.wait_phase(custom, ns, "budget", "Failed")
    failed = jobs.condition(budget, "Failed")
    assert failed["reason"] == "RestartLimitExceeded"
    assert "budget-0-a1" in failed["message"] and "exit code 7" in failed["message"]
    # Terminal means terminal: no third attempt, nothing left running; the failed pods stay for their logs.
    pods = jobs.job_pods(core, ns, "budget")
    assert {p.metadata.labels[LABEL_ATTEMPT] for p in pods} <= {"0", "1"}
    assert sorted(p.metadata.name for p in pods if p.status.phase == "Failed") == ["budget-0-a1", "budget-1-a0"]
    wait_for(lambda: all(p.status.phase != "Running" or p.metadata.deletion_timestamp
                         for p in jobs.job_pods(core, ns, "budget")), timeout=30, what="nothing of budget running")


@pytest.fixture
def lossy_pool(local_cluster: LocalCluster, core: client.CoreV1Api) -> Iterator[str]:
    with own_pool(local_cluster, core, "lossy") as pool:
        yield pool.prefix


def test_node_lost_evicts_and_restarts_without_counting(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str, lossy_pool: str
) -> None:
    ns = job_namespace
    # The recreate path: kwok runs no containers, so the other pod of an InPlace gang (the default on nodes
    # that declare the feature, as these do) never restarts in place; the test below is InPlace's.
    manifest = training_job("lossy", 2, failurePolicy={**FAST, "restartStrategy": "BlockingRecreate"},
                            podTemplate=on_pool(lossy_pool))
    jobs.apply(kubeconfig, ns, manifest)
    jobs.wait_phase(custom, ns, "lossy", "Running")
    lost_node = core.read_namespaced_pod("lossy-1-a0", ns).spec.node_name

    core.patch_node(lost_node, {"metadata": {"labels": {"node-not-ready.stage.kwok.x-k8s.io": "true"}}})

    job = wait_attempt_running(custom, ns, "lossy", 1)
    status = job["status"]
    assert (status["restarts"], status["uncountedRestarts"]) == (0, 1)
    assert status["restartHistory"][-1]["counted"] is False
    assert lost_node not in {p.spec.node_name for p in attempt_pods(core, ns, "lossy", 1)}


def test_in_place_a_lost_node_costs_only_its_pod_replaced_on_another_node(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str, lossy_pool: str
) -> None:
    """restartStrategy InPlace: node loss replaces the one pod (stock toleration: the operator acts when the
    node has been NotReady nodeLossTolerationSeconds). kwok runs no containers, so the pod that stays is not
    restarted here: that half is tests/integration/realnodes/test_real_training.py."""
    ns = job_namespace
    manifest = training_job("spared", 2, failurePolicy={"restartStrategy": "InPlace"},
                            podTemplate=on_pool(lossy_pool))
    jobs.apply(kubeconfig, ns, manifest)
    jobs.wait_phase(custom, ns, "spared", "Running")
    stays = core.read_namespaced_pod("spared-0-a0", ns)
    lost_node = core.read_namespaced_pod("spared-1-a0", ns).spec.node_name

    core.patch_node(lost_node, {"metadata": {"labels": {"node-not-ready.stage.kwok.x-k8s.io": "true"}}})

    replacement = wait_for(lambda: next((p for p in jobs.job_pods(core, ns, "spared")
                                         if p.metadata.name == "spared-1-a1" and p.spec.node_name), None),
                           timeout=120, what="node 1's pod replaced on another node")
    assert replacement.spec.node_name not in (lost_node, stays.spec.node_name)
    status = jobs.get_job(custom, ns, "spared")["status"]
    assert (status["attempt"], status["podsAttempt"], status["uncountedRestarts"]) == (1, 0, 1)
    record = status["restartHistory"][-1]
    assert (record["reason"], record["index"], record["counted"]) == ("NodeLost", 1, False)
    again = core.read_namespaced_pod("spared-0-a0", ns)
    assert again.metadata.uid == stays.metadata.uid, "the pod on the healthy node stays"
    assert again.metadata.annotations["multinode.dev/attempt"] == "1", "and is told the new attempt"
    assert replacement.metadata.annotations["multinode.dev/attempt"] == "1"
    config_maps = {e.config_map_ref.name for e in replacement.spec.containers[0].env_from}
    assert config_maps == {e.config_map_ref.name for e in again.spec.containers[0].env_from}, "one rendezvous"
    wait_for(lambda: "spared-1-a0" not in {p.metadata.name for p in jobs.job_pods(core, ns, "spared")},
             timeout=60, what="the lost node's pod deleted")


def test_suspend_deletes_pods_keeps_counters_and_resume_starts_a_new_attempt(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    jobs.apply(kubeconfig, ns, training_job("pause", 2))
    jobs.wait_phase(custom, ns, "pause", "Running")

    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "pause", {"spec": {"suspend": True}})
    suspended = jobs.wait_phase(custom, ns, "pause", "Suspended")
    wait_for(lambda: all(p.metadata.deletion_timestamp or p.status.phase != "Running"
                         for p in jobs.job_pods(core, ns, "pause")), timeout=30, what="pods stopped")
    assert jobs.condition(suspended, "Suspended")["status"] == "True"

    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "pause", {"spec": {"suspend": False}})
    resumed = wait_attempt_running(custom, ns, "pause", 1)
    assert resumed["status"]["restarts"] == 0
    assert len(attempt_pods(core, ns, "pause", 1)) == 2


def test_created_suspended_for_kueue_waits_without_pods_until_admitted(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    manifest = training_job("queued", 2, suspend=True)
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu-queue"}
    jobs.apply(kubeconfig, ns, manifest)
    jobs.wait_phase(custom, ns, "queued", "Suspended")
    assert jobs.job_pods(core, ns, "queued") == []

    # Kueue admits the job by flipping suspend.
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "queued", {"spec": {"suspend": False}})
    admitted = jobs.wait_phase(custom, ns, "queued", "Running")
    assert admitted["status"]["attempt"] == 0


def test_deadline_fails_the_job_and_ttl_deletes_a_finished_one(
    api: client.ApiClient, core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str,
    job_namespace: str
) -> None:
    ns = job_namespace
    jobs.apply(kubeconfig, ns, training_job("slow", 1, activeDeadlineSeconds=3))
    with jobs.PhaseRecorder(api, ns, "brief") as brief:
        jobs.apply(kubeconfig, ns, training_job("brief", 1, ttlSecondsAfterFinished=2,
                                                     pod_annotations={FINISH_AFTER: "1s"}))
        slow = jobs.wait_phase(custom, ns, "slow", "Failed", timeout=30)
        assert jobs.condition(slow, "Failed")["reason"] == "DeadlineExceeded"
        wait_for(lambda: "Succeeded" in brief.phases, timeout=30, what="brief Succeeded")

    wait_for(lambda: jobs.job_gone(custom, ns, "brief"), timeout=30, what="the finished job deleted by its TTL")


def test_pods_of_one_attempt_with_different_digests_are_caught(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    manifest = training_job("drift", 2, failurePolicy={**FAST, "maxRestarts": 0},
                                 pod_annotations={START_AFTER: "3s"})
    jobs.apply(kubeconfig, ns, manifest)
    wait_for(lambda: len(jobs.job_pods(core, ns, "drift")) == 2, timeout=30, what="pods created")
    # Node 1 pulls a tag that moved meanwhile: its runtime reports another digest.
    core.patch_namespaced_pod("drift-1-a0", ns, {"metadata": {"annotations": {DIGEST: "sha256:" + "b" * 64}}})

    job = jobs.wait_phase(custom, ns, "drift", "Failed", timeout=30)
    consistent = jobs.condition(job, "ImageConsistent")
    assert consistent["status"] == "False"
    assert "drift-0-a0" in consistent["message"] and "drift-1-a0" in consistent["message"]
    failed = jobs.condition(job, "Failed")
    assert failed["reason"] == "RestartLimitExceeded" and "run different image digests" in failed["message"]


def test_topology_places_every_node_in_one_block(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    block = "network.topology.nvidia.com/block"
    jobs.apply(kubeconfig, ns, training_job("packed", 4, topology={"sameDomainLabel": block}))
    job = jobs.wait_phase(custom, ns, "packed", "Running")

    domain = job["status"]["topologyDomain"]
    blocks = {core.read_node(p.spec.node_name).metadata.labels[block] for p in jobs.job_pods(core, ns, "packed")}
    assert blocks == {domain}
    # With the native gang the block is the PodGroup's topology constraint: the scheduler chose it, no node
    # selector pins it (without the API the operator's selector does: tests/unit/reconcile/test_placement.py).
    assert job["status"]["scheduling"]["gang"] == "PodGroup"
    group = custom.get_namespaced_custom_object("scheduling.k8s.io", "v1alpha2", ns, "podgroups", "packed-a0")
    assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": block}]}
    assert not any(block in (p.spec.node_selector or {}) for p in jobs.job_pods(core, ns, "packed"))
