"""One pod per node, on the real scheduler with kwok's 8 GPU nodes: a job's node pods never share a machine,
whatever their resources; a job with more nodes than machines waits and says so; a job asking for a
resource no node offers says that, not a bare Unschedulable."""

from __future__ import annotations

from kubernetes import client

from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from tests.support import jobs

KWOK_NODES = 8  # the session cluster's GPU nodes (localcluster's default pool)


def reason(custom: client.CustomObjectsApi, ns: str, name: str) -> tuple[str | None, str]:
    status = (jobs.get_job(custom, ns, name) or {}).get("status") or {}
    running = jobs.condition({"status": status}, "Running") or {}
    return running.get("reason"), running.get("message", "")


def test_a_4_node_job_of_1_gpu_each_runs_on_4_machines(core: client.CoreV1Api, custom: client.CustomObjectsApi,
                                                       kubeconfig: str, job_namespace: str) -> None:
    jobs.apply(kubeconfig, job_namespace, training_job("spread", 4, gpus=1))
    jobs.wait_phase(custom, job_namespace, "spread", "Running")
    nodes = [p.spec.node_name for p in jobs.job_pods(core, job_namespace, "spread")]
    assert len(nodes) == 4 and len(set(nodes)) == 4, nodes


def test_a_job_with_more_nodes_than_machines_waits_and_says_so(custom: client.CustomObjectsApi, kubeconfig: str,
                                                               job_namespace: str) -> None:
    jobs.apply(kubeconfig, job_namespace, training_job("crowded", KWOK_NODES + 1, gpus=1))
    got = wait_for(lambda: reason(custom, job_namespace, "crowded")[0] == "NotEnoughNodes"
                   and reason(custom, job_namespace, "crowded"), timeout=60, what="reason NotEnoughNodes")
    assert f"{KWOK_NODES + 1} nodes needed (one pod per node), {KWOK_NODES} Ready node(s)" in got[1]
    assert jobs.get_job(custom, job_namespace, "crowded")["status"]["phase"] == "Pending"


def test_a_resource_no_node_offers_is_named(custom: client.CustomObjectsApi, kubeconfig: str,
                                            job_namespace: str) -> None:
    body = training_job("no-plugin", 2, gpus=None, resourcesPerNode={"gpus": 8, "gpuResourceName": "amd.com/gpu"})
    jobs.apply(kubeconfig, job_namespace, body)
    got = wait_for(lambda: reason(custom, job_namespace, "no-plugin")[0] == "NoNodeOffersResource"
                   and reason(custom, job_namespace, "no-plugin"), timeout=60, what="reason NoNodeOffersResource")
    assert "no node offers amd.com/gpu (spec.resourcesPerNode.gpuResourceName)" in got[1]
