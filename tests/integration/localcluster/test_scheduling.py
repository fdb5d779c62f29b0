"""The local control plane schedules GPU pods like a real cluster, and evicts from lost nodes."""

from __future__ import annotations

import uuid

from kubernetes import client
from localcluster import LocalCluster, NodePoolConfig

from localcluster.harness.waiting import wait_for


def gpu_pod(name: str, gpus: int, rdma: int = 0, node_selector: dict | None = None) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)}
    if rdma:
        limits["rdma/hca_shared_devices_a"] = str(rdma)
    spec: dict = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "example.invalid/train:1", "resources": {"limits": limits}}],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_pod_with_8_gpus_and_rdma_runs_on_a_fake_gpu_node(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, gpu_pod("fits", gpus=8, rdma=1))

    pod = wait_for(lambda: _pod_if_phase(core, namespace, "fits", "Running"), timeout=60, what="pod Running")

    node = core.read_node(pod.spec.node_name)
    assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_pod_with_9_gpus_stays_pending_unschedulable(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, gpu_pod("too-big", gpus=9))

    def unschedulable():
        pod = core.read_namespaced_pod("too-big", namespace)
        cond = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        return cond if cond is not None and cond.status == "False" else None

    cond = wait_for(unschedulable, timeout=60, what="PodScheduled=False")
    assert cond.reason == "Unschedulable"
    assert "nvidia.com/gpu" in cond.message
    assert core.read_namespaced_pod("too-big", namespace).status.phase == "Pending"


def test_node_marked_not_ready_gets_its_pods_evicted(
    local_cluster: LocalCluster, core: client.CoreV1Api, namespace: str
) -> None:
    # A node of its own, so the other tests' nodes stay healthy.
    prefix = f"doomed-{uuid.uuid4().hex[:6]}"
    [node_name] = local_cluster.create_nodes(NodePoolConfig(count=1, name_prefix=prefix))
    try:
        wait_for(lambda: _node_ready(core, node_name) is True, timeout=60, what=f"{node_name} Ready")
        core.create_namespaced_pod(namespace,
                                   gpu_pod("victim", gpus=8, node_selector={"kubernetes.io/hostname": node_name}))
        wait_for(lambda: _pod_if_phase(core, namespace, "victim", "Running"), timeout=60, what="victim Running")

        core.patch_node(node_name, {"metadata": {"labels": {"node-not-ready.stage.kwok.x-k8s.io": "true"}}})

        wait_for(lambda: _node_ready(core, node_name) is False, timeout=60, what=f"{node_name} NotReady")
        # The node lifecycle controller taints the node; the taint-eviction controller deletes the pod
        # once its (shortened) not-ready toleration runs out.
        wait_for(lambda: _pod_gone(core, namespace, "victim"), timeout=90, what="victim evicted")
        taints = {t.key for t in core.read_node(node_name).spec.taints or []}
        assert "node.kubernetes.io/not-ready" in taints
    finally:
        core.delete_node(node_name)


def _pod_if_phase(core: client.CoreV1Api, namespace: str, name: str, phase: str):
    pod = core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase == phase else None


def _node_ready(core: client.CoreV1Api, name: str) -> bool | None:
    for c in core.read_node(name).status.conditions or []:
        if c.type == "Ready":
            return c.status == "True"
    return None


def _pod_gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
        return False
    except client.ApiException as e:
        if e.status == 404:
            return True
        raise
