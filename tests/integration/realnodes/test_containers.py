"""Real containers on real nodes: exit codes, logs, exec, fake GPUs from the device plugin, the taint."""

from __future__ import annotations

from kubernetes import client
from localcluster import LocalCluster
from localcluster.netplan import REAL_NODE_LABEL

from localcluster.harness.kube import kubectl
from tests.support.realnodes import REAL_NODES, pod_log, real_node_names, real_pod, wait_pod_done, wait_pod_running
from localcluster.harness.waiting import wait_for


def test_exit_code_and_logs_of_a_real_container(real_cluster: LocalCluster, real_core: client.CoreV1Api,
                                                real_namespace: str) -> None:
    script = "import socket, sys; print('hello from', socket.gethostname()); sys.exit(3)"
    real_core.create_namespaced_pod(real_namespace, real_pod("exits", 1, script))
    pod = wait_pod_done(real_core, real_namespace, "exits")
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    logs = kubectl(str(real_cluster.kubeconfig), "logs", "-n", real_namespace, "exits").stdout
    assert logs == "hello from exits\n"


def test_exec_into_a_running_container_and_its_fake_gpus(real_cluster: LocalCluster, real_core: client.CoreV1Api,
                                                         real_namespace: str) -> None:
    script = "import time; print('up', flush=True); time.sleep(600)"
    real_core.create_namespaced_pod(real_namespace, real_pod("sleeper", 0, script, gpus=2))
    wait_pod_running(real_core, real_namespace, "sleeper")
    out = kubectl(str(real_cluster.kubeconfig), "exec", "-n", real_namespace, "sleeper", "--",
                  "python3", "-c", "import os; print(6 * 7, os.environ['NVIDIA_VISIBLE_DEVICES'])").stdout.split()
    assert out[0] == "42"
    # The device plugin allocated two of the node's eight devices to this container.
    assert len(out[1].split(",")) == 2 and all(d.startswith("nvidia-com-gpu-") for d in out[1].split(","))
    assert "up" in pod_log(real_core, real_namespace, "sleeper")


def test_real_nodes_advertise_gpus_and_keep_untolerating_pods_off(real_core: client.CoreV1Api,
                                                                  real_namespace: str) -> None:
    real = real_core.list_node(label_selector=f"{REAL_NODE_LABEL}=true").items
    assert {n.metadata.name for n in real} == real_node_names()
    for node in real:
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["rdma/hca_shared_devices_a"] == "1"
        assert node.metadata.labels["nvidia.com/gpu.product"]
        assert node.metadata.labels["network.topology.nvidia.com/block"]
        assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [(REAL_NODE_LABEL, "true", "NoSchedule")]
    pod = real_pod("no-toleration", 0, "print('never')")
    pod["spec"]["tolerations"] = []
    real_core.create_namespaced_pod(real_namespace, pod)

    def unschedulable() -> str | None:
        for cond in real_core.read_namespaced_pod("no-toleration", real_namespace).status.conditions or []:
            if cond.type == "PodScheduled" and cond.reason == "Unschedulable":
                return cond.message
        return None

    message = wait_for(unschedulable, timeout=60, what="the scheduler to refuse the pod")
    assert f"{REAL_NODES} node(s) had untolerated taint" in message
