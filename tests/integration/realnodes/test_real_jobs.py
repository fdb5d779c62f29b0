"""Jobs on real nodes under the operator installed by helm: the preflight against real DNS, image digest
pinning with the real image IDs, the Baseten-style env used by a real script, one pod per machine however
few GPUs a pod asks for, and the leading operator replica killed mid-job (another replica finishes it)."""

from __future__ import annotations

import json
import textwrap
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from localcluster import LocalCluster
from localcluster import publish
from localcluster.images import TRAINER, build_images

from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from tests.support import jobs
from tests.support.realnodes import (REAL_NODES, clients, follow_log, leading_operator, pod_log, real_job,
                                    real_node_names, registry_chart, wait_operator_env)
from localcluster.harness.waiting import wait_for
from tests.support.chart import helm



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
    # The trainer by the digest its layout has, which is the one the registry serves it by.
    digest = build_images((TRAINER,))[TRAINER].manifest_digest
    digest_ref = f"{publish.image_repository(cluster.registry, TRAINER)}@{digest}"
    _create(custom, namespace, real_job("baseten", 2, BASETEN_SCRIPT, image=digest_ref))
    job = jobs.wait_phase(custom, namespace, "baseten", "Succeeded", timeout=300)
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}=baseten").items
    trainers = {p.metadata.name: p for p in pods if p.spec.containers[0].name != "mirror"}
    assert len(trainers) == 2
    # One pod per node: each real node has 8 GPUs, room for both 1-GPU pods, yet they run on two machines.
    nodes = {p.spec.node_name for p in trainers.values()}
    assert len(nodes) == 2 and nodes <= real_node_names(), nodes
    for pod in trainers.values():
        assert pod.spec.containers[0].image == digest_ref
        # What the kubelet ran is the image we pinned: the CRI reports the same digest.
        assert digest_ref.split("@")[1] in pod.status.container_statuses[0].image_id
    logs = {name: pod_log(core, namespace, name) for name in trainers}
    assert "rank 1 heard: leader here" in logs["baseten-1-a0"]
    assert "BT rank 0 of 2, leader baseten-0.baseten." in logs["baseten-0-a0"]
    assert "ImageDigestMismatch" not in json.dumps(job["status"])


def test_preflight_diagnoses_a_peer_that_never_gets_a_dns_record(real_operator: tuple[LocalCluster, str],
                                                                operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    _, release_namespace = real_operator
    core, custom = clients(cluster)
    kc = str(cluster.kubeconfig)
    # A short preflight timeout for this test's job only (pods take it when created), restored after.
    helm("upgrade", "mn", *registry_chart(cluster), "-n", release_namespace, "--reuse-values",
         "--set", "operator.preflightTimeoutSeconds=20", "--wait", "--kubeconfig", kc, timeout=240)
    try:
        wait_operator_env(core, release_namespace, "MULTINODE_PREFLIGHT_TIMEOUT_SECONDS", "20")
        # One node more than there are real nodes (one pod per node): one pod stays Pending, so its name never
        # resolves. Not ganged (a native gang would bind none of them), so the others run and wait for its name.
        size = REAL_NODES + 1
        _create(custom, namespace, real_job("nodns", size, "print('never')", scheduling={"nativePodGroup": False},
                                            failurePolicy={"maxRestarts": 0}))

        # While it waits, each bound pod's preflight says which peer it waits for. Which one stays
        # unscheduled is the scheduler's choice: read the pods that were bound.
        def waiting_logs() -> dict[str, str] | None:
            logs = {}
            for pod in core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}=nodns").items:
                try:
                    log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="preflight")
                except client.ApiException:
                    continue  # not bound, or the init container has not started yet
                if log and f"waiting for 1/{size} peers" in log:
                    logs[pod.metadata.name] = log
            return logs if len(logs) == REAL_NODES else None

        logs = wait_for(waiting_logs, timeout=120, what="every bound pod's preflight waiting for the last peer")
        [pending] = {f"nodns-{i}" for i in range(size)} - {name.rsplit("-", 1)[0] for name in logs}
        assert all(f"{pending}.nodns.{namespace}.svc" in log for log in logs.values()), logs

        # Each waiting preflight's whole log, followed from now until its container ends: the failed job's pods are
        # deleted soon after, so a read once the status says PreflightFailed can find them gone (seen: a 404).
        with ThreadPoolExecutor(max_workers=len(logs)) as pool:
            followed = {name: pool.submit(follow_log, core, namespace, name, "preflight") for name in logs}

            def preflight_failed():
                status = jobs.get_job(custom, namespace, "nodns").get("status") or {}
                return status if "PeerDNSUnresolved" in json.dumps(status) else None

            status = wait_for(preflight_failed, timeout=120, what="the preflight to give up (20 s)")
            full_logs = {name: future.result(timeout=120) for name, future in followed.items()}
        text = json.dumps(status)
        # The peer's node row is listed (not fine). Whether it still has no node depends on the scheduler: the
        # failed pods free their nodes, and it may bind the last one before the operator deletes it.
        rows = {f"nodns-{n['index']}": n for n in status["nodeStatuses"]}
        assert pending in rows and rows[pending].get("phase") != "Running", status["nodeStatuses"]
        assert "PreflightFailed" in text and f"{pending}.nodns.{namespace}.svc" in text, text
        for name, log in full_logs.items():
            assert "did not resolve within 20s" in log, (name, log)
    finally:
        helm("upgrade", "mn", *registry_chart(cluster), "-n", release_namespace, "--reuse-values",
             "--set", "operator.preflightTimeoutSeconds=300", "--wait", "--kubeconfig", kc, timeout=240)
        wait_operator_env(core, release_namespace, "MULTINODE_PREFLIGHT_TIMEOUT_SECONDS", "300")


def test_the_leading_operator_killed_mid_job_another_replica_finishes_it_with_no_duplicate_or_orphan(
        real_operator: tuple[LocalCluster, str], operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    _, release_namespace = real_operator
    core, custom = clients(cluster)
    _create(custom, namespace, real_job("survivor", 2, "import time; print('training', flush=True); time.sleep(30)"))

    def both_running():
        pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}=survivor").items
        return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) else None

    before = {p.metadata.uid for p in wait_for(both_running, timeout=120, what="both pods Running")}
    leader = wait_for(lambda: leading_operator(core, release_namespace), timeout=60, what="a leading replica")
    # No grace: the leader's process is killed without releasing its Lease, as when its node dies. When the
    # Lease expires, the standby or the Deployment's replacement pod, whichever asks first, takes over.
    core.delete_namespaced_pod(leader.metadata.name, release_namespace, grace_period_seconds=0)

    def another_leads():
        new = leading_operator(core, release_namespace)
        return new if new is not None and new.metadata.name != leader.metadata.name else None

    wait_for(another_leads, timeout=90, what="another replica leading")
    job = jobs.wait_phase(custom, namespace, "survivor", "Succeeded", timeout=120)
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}=survivor").items
    assert {p.metadata.uid for p in pods} == before  # the same two pods: none duplicated, none replaced
    assert all(p.metadata.owner_references[0].uid == job["metadata"]["uid"] for p in pods)
    assert job["status"].get("attempt", 0) == 0 and job["status"].get("restarts", 0) == 0
