"""The operator installed by helm from the registry's OCI chart (its image pulled from the registry) runs as a
pod on a real node, under the chart's ServiceAccount and RBAC, and reconciles jobs whose pods really run: the
preflight resolves the peers' real DNS names, the trainers see the env contract, and the mirror pod copies a
checkpoint and reports it."""

from __future__ import annotations

import textwrap
from pathlib import Path

from kubernetes import client
from localcluster import LocalCluster
from localcluster.images import OPERATOR

from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from tests.support import jobs
from localcluster.harness.kube import new_namespace
from tests.support.realnodes import pod_log, real_job, real_node_names, session_image
from localcluster.harness.waiting import wait_for


def _create(cluster: LocalCluster, namespace: str, body: dict) -> None:
    client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                                 PLURAL, body)


RANK_SCRIPT = textwrap.dedent("""
    import os
    e = os.environ
    print(f"rank {e['NODE_RANK']} of {e['WORLD_SIZE']} on {e['MULTINODE_HOST_NODE']} master {e['MASTER_ADDR']}")
""")


def test_the_chart_runs_the_operator_on_a_real_node(real_operator: tuple[LocalCluster, str]) -> None:
    cluster, namespace = real_operator
    core = client.CoreV1Api(cluster.api_client())
    pods = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/name=multinode-operator").items
    assert len(pods) == 2, "two replicas: a leader and a standby"
    for pod in pods:
        assert pod.status.phase == "Running" and pod.spec.node_name.startswith("real-node-")
        assert pod.spec.service_account_name == "mn-multinode-operator"
        assert pod.spec.containers[0].image == session_image(OPERATOR)
        assert pod.spec.containers[0].image_pull_policy == "IfNotPresent"  # pulled by the kubelet, as users have it
        # A real process: the leader's kopf answers the probes, and so does the standby while it waits.
        assert pod.status.container_statuses[0].ready
    # One of them holds the Lease, under its pod name (the downward API) plus the operator's suffix.
    lease = client.CoordinationV1Api(cluster.api_client()).read_namespaced_lease("mn-multinode-operator", namespace)
    holder = lease.spec.holder_identity or ""
    assert sum(holder.startswith(p.metadata.name + "_") for p in pods) == 1, holder


def test_a_job_runs_on_real_nodes_with_the_env_contract(real_operator: tuple[LocalCluster, str]) -> None:
    cluster, _ = real_operator
    core = client.CoreV1Api(cluster.api_client())
    custom = client.CustomObjectsApi(cluster.api_client())
    namespace = new_namespace(core, prefix="realjob")
    try:
        _create(cluster, namespace, real_job("envcheck", 2, RANK_SCRIPT))
        job = jobs.wait_phase(custom, namespace, "envcheck", "Succeeded", timeout=180)
        assert job["status"]["phase"] == "Succeeded"
        pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}=envcheck").items
        trainers = sorted((p for p in pods if p.spec.node_name), key=lambda p: p.metadata.name)
        nodes = {p.spec.node_name for p in trainers}
        assert len(nodes) == 2 and nodes <= real_node_names(), nodes
        logs = "".join(pod_log(core, namespace, p.metadata.name) for p in trainers)
        for rank in (0, 1):
            assert f"rank {rank} of 2 on real-node-" in logs
        # The preflight init container (the operator image) resolved every peer's name before training.
        for p in trainers:
            init = p.status.init_container_statuses[0]
            assert init.state.terminated.exit_code == 0 and init.image == session_image(OPERATOR)
    finally:
        core.delete_namespace(namespace)


CHECKPOINT_SCRIPT = textwrap.dedent("""
    import os, pathlib, time
    if os.environ["NODE_RANK"] == "0":
        d = pathlib.Path(os.environ["MULTINODE_JOB_CACHE_DIR"]) / "step-10"
        d.mkdir(parents=True)
        (d / "weights.bin").write_bytes(os.urandom(1 << 20))
        (d / "COMPLETE").write_text("")
        print("saved", d, flush=True)
    time.sleep(float(os.environ.get("HOLD_SECONDS", "0")))
""")


def test_the_mirror_pod_mirrors_a_checkpoint_on_a_real_node(real_operator: tuple[LocalCluster, str],
                                                             tmp_path: Path) -> None:
    cluster, _ = real_operator
    core = client.CoreV1Api(cluster.api_client())
    custom = client.CustomObjectsApi(cluster.api_client())
    namespace = new_namespace(core, prefix="realckpt")
    # hostPath volumes: every real node is this host, so they are shared like a real RWX volume. The
    # mirror runs as the image's non-root user.
    for claim in ("cache", "ckpt"):
        (tmp_path / claim).mkdir()
        (tmp_path / claim).chmod(0o777)
        core.create_persistent_volume({
            "metadata": {"name": f"{namespace}-{claim}"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "manual",
                     "hostPath": {"path": str(tmp_path / claim)},
                     "claimRef": {"namespace": namespace, "name": claim}}})
        core.create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "manual",
                     "volumeName": f"{namespace}-{claim}", "resources": {"requests": {"storage": "1Gi"}}}})
    try:
        body = real_job("ckpt", 2, CHECKPOINT_SCRIPT, cache={"claimName": "cache"},
                         checkpointing={"claimName": "ckpt", "completion": "marker", "intervalSeconds": 2,
                                        "settleSeconds": 1},
                         env=[{"name": "HOLD_SECONDS", "value": "20"}])
        _create(cluster, namespace, body)

        def latest() -> str | None:
            job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "ckpt")
            return (((job.get("status") or {}).get("checkpoints") or {}).get("latest") or {}).get("name")

        assert wait_for(latest, timeout=180, what="status.checkpoints.latest") == "step-10"
        mirrored = tmp_path / "ckpt" / "ckpt" / "step-10"
        written = tmp_path / "cache" / "ckpt" / "step-10" / "weights.bin"
        assert (mirrored / "weights.bin").read_bytes() == written.read_bytes()
        mirror = [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name.endswith("mirror")]
        assert len(mirror) == 1 and mirror[0].spec.node_name.startswith("real-node-")
        jobs.wait_phase(custom, namespace, "ckpt", "Succeeded", timeout=120)
    finally:
        core.delete_namespace(namespace)
        for claim in ("cache", "ckpt"):
            core.delete_persistent_volume(f"{namespace}-{claim}")
