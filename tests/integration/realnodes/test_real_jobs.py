"""Jobs on real nodes under the operator installed by helm: the preflight against real DNS, image digest
pinning with the real image IDs, the Baseten-style env used by a real script, and the operator's own pod
deleted mid-job."""

from __future__ import annotations

import pytest

import json
import textwrap

from kubernetes import client
from localcluster import LocalCluster
from localcluster.images import TRAINER_IMAGE, build_images

from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from tests.support import jobs
from tests.support.realnodes import clients, pod_log, real_job
from localcluster.harness.waiting import wait_for
from tests.unit.chart.chart import CHART_DIR, helm



def _create(custom: client.CustomObjectsApi, namespace: str, body: dict) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


# Rank 0 serves on the leader address; every other rank connects to it by BT_LEADER_ADDR.
BASETEN_SCRIPT = textwrap.dedent("""
    import os, socket, time
    rank, size, leader = int(os.environ["BT_NODE_RANK"]), int(os.environ["BT_GROUP_SIZE"]), os.environ["BT_LEADER_ADDR"]
    print(f"BT rank {rank} of {size}, leader {leader}, gpus {os.environ['BT_NUM_GPUS']}", flush=True)
    if rank == 0:
        srv = socket.create_server(("0.0.0.0", 7100))
        for _ in range(size - 1):
            conn, _ = srv.accept(); conn.sendall(b"leader here"); conn.close()
    else:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection((leader, 7100), timeout=5) as c:
                    print("rank", rank, "heard:", c.recv(64).decode(), flush=True); break
            except OSError:
                if time.monotonic() > deadline: raise
                time.sleep(0.2)
""")


def test_a_digest_pinned_image_and_the_baseten_env_on_real_nodes(operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    core, custom = clients(cluster)
    trainer = next(image for image in build_images() if image.ref == TRAINER_IMAGE)
    _create(custom, namespace, real_job("baseten", 2, BASETEN_SCRIPT, image=trainer.digest_ref))
    job = jobs.wait_phase(custom, namespace, "baseten", "Succeeded", timeout=180)
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}=baseten").items
    trainers = {p.metadata.name: p for p in pods if p.spec.containers[0].name != "mirror"}
    assert len(trainers) == 2
    for pod in trainers.values():
        assert pod.spec.containers[0].image == trainer.digest_ref
        # What the kubelet ran is the image we pinned: the CRI reports the same digest.
        assert trainer.digest_ref.split("@")[1] in pod.status.container_statuses[0].image_id
    logs = {name: pod_log(core, namespace, name) for name in trainers}
    assert "rank 1 heard: leader here" in logs["baseten-1-a0"]
    assert "BT rank 0 of 2, leader baseten-0.baseten." in logs["baseten-0-a0"]
    assert "ImageDigestMismatch" not in json.dumps(job["status"])


@pytest.mark.xfail(reason="known defect, to fix first: with gang scheduling by default the un-ganged 3-of-2 job's "
                          "preflight no longer fails within 120 s (investigation pending)", strict=False)
def test_preflight_diagnoses_a_peer_that_never_gets_a_dns_record(real_operator: tuple[LocalCluster, str],
                                                                operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    _, release_namespace = real_operator
    core, custom = clients(cluster)
    kc = str(cluster.kubeconfig)
    # A short preflight timeout for this test's job only (pods take it when created), restored after.
    helm("upgrade", "mn", str(CHART_DIR), "-n", release_namespace, "--reuse-values",
         "--set", "operator.preflightTimeoutSeconds=20", "--wait", "--kubeconfig", kc, timeout=240)
    try:
        # Three 8-GPU nodes on two real nodes: node 2 stays Pending, so its name never resolves.
        # Not ganged (a native gang would bind none of the three), so two run and wait for the third's name.
        _create(custom, namespace, real_job("nodns", 3, "print('never')", gpus=8, scheduling={"nativePodGroup": False},
                                            failurePolicy={"maxRestarts": 0}))

        # While it waits, the preflight says which peer it waits for (node 2 is Pending: the job's
        # condition reports that first).
        def waiting_log() -> str | None:
            try:
                log = core.read_namespaced_pod_log("nodns-0-a0", namespace, container="preflight")
            except client.ApiException:
                return None
            return log if log and "waiting for 1/3 peers" in log else None

        # Which of the three stays unscheduled is the scheduler's choice: the log names some peer.
        peers = [f"nodns-{i}.nodns.{namespace}.svc" for i in (1, 2)]
        assert any(peer in wait_for(waiting_log, timeout=120, what="the preflight's wait") for peer in peers)

        def preflight_failed():
            status = jobs.get_job(custom, namespace, "nodns").get("status") or {}
            return status if "PeerDNSUnresolved" in json.dumps(status) else None

        status = wait_for(preflight_failed, timeout=120, what="the preflight to give up (20 s)")
        text = json.dumps(status)
        [unscheduled] = [n["index"] for n in status["nodeStatuses"] if not n.get("node")]
        assert "PreflightFailed" in text and f"nodns-{unscheduled}.nodns.{namespace}.svc" in text, text
        log = core.read_namespaced_pod_log("nodns-0-a0", namespace, container="preflight")
        assert "did not resolve within 20s" in log
    finally:
        helm("upgrade", "mn", str(CHART_DIR), "-n", release_namespace, "--reuse-values",
             "--set", "operator.preflightTimeoutSeconds=300", "--wait", "--kubeconfig", kc, timeout=240)


def test_the_operator_pod_deleted_mid_job_leaves_no_duplicate_or_orphan(
        real_operator: tuple[LocalCluster, str], operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    _, release_namespace = real_operator
    core, custom = clients(cluster)
    _create(custom, namespace, real_job("survivor", 2, "import time; print('training', flush=True); time.sleep(25)"))

    def both_running():
        pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}=survivor").items
        return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) else None

    before = {p.metadata.uid for p in wait_for(both_running, timeout=120, what="both pods Running")}
    selector = "app.kubernetes.io/name=multinode-operator"
    old = core.list_namespaced_pod(release_namespace, label_selector=selector).items[0].metadata.name
    core.delete_namespaced_pod(old, release_namespace)

    def new_operator_ready():
        pods = core.list_namespaced_pod(release_namespace, label_selector=selector).items
        return [p for p in pods if p.metadata.name != old and p.status.container_statuses
                and p.status.container_statuses[0].ready]

    wait_for(new_operator_ready, timeout=120, what="the Deployment's new operator pod Ready")
    job = jobs.wait_phase(custom, namespace, "survivor", "Succeeded", timeout=120)
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}=survivor").items
    assert {p.metadata.uid for p in pods} == before  # the same two pods: none duplicated, none replaced
    assert all(p.metadata.owner_references[0].uid == job["metadata"]["uid"] for p in pods)
    assert job["status"].get("attempt", 0) == 0 and job["status"].get("restarts", 0) == 0
