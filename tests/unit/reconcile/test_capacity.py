"""reconcile/capacity.py: an Unschedulable verdict said in words a user can act on, when the nodes show why."""

from __future__ import annotations

import pytest

from multinode.api import Phase
from multinode.api.conditions import Reason
from multinode.reconcile.capacity import explain_unschedulable
from multinode.reconcile.outcome import Verdict
from multinode.reconcile.placement import ObservedNode, needs_nodes
from tests.unit.reconcile.planning import condition, pod, run
from multinode.testing import stored_job

SCHEDULER = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
UNSCHEDULABLE = Verdict(Phase.PENDING, Reason.UNSCHEDULABLE, f"2/2 pods cannot be scheduled; llama-0-a0: {SCHEDULER}")


def gpu_nodes(count: int, gpus: int = 8, **extra: str) -> tuple[ObservedNode, ...]:
    return tuple(ObservedNode(f"n{i}", allocatable={"nvidia.com/gpu": str(gpus), **extra}) for i in range(count))


CPU_NODES = tuple(ObservedNode(f"c{i}", allocatable={"cpu": "96"}) for i in range(8))
RDMA = {"network": {"rdma": {"count": 1}}}


@pytest.mark.parametrize(("spec", "nodes", "reason", "says"), [
    # No device plugin: not one node advertises the resource.
    ({"resourcesPerNode": {"gpus": 8}}, CPU_NODES, Reason.NO_NODE_OFFERS_RESOURCE,
     "no node offers nvidia.com/gpu (spec.resourcesPerNode.gpuResourceName)"),
    ({"resourcesPerNode": {"gpus": 8, "gpuResourceName": "amd.com/gpu"}}, gpu_nodes(8), Reason.NO_NODE_OFFERS_RESOURCE,
     "no node offers amd.com/gpu"),
    ({"resourcesPerNode": {"gpus": 8}, **RDMA}, gpu_nodes(8), Reason.NO_NODE_OFFERS_RESOURCE,
     "no node offers rdma/hca_shared_devices_a (spec.network.rdma.resourceName)"),
    # More nodes than machines that can take one of its pods.
    ({"numNodes": 4, "resourcesPerNode": {"gpus": 1}}, gpu_nodes(3), Reason.NOT_ENOUGH_NODES,
     "4 nodes needed (one pod per node), 3 Ready node(s)"),
    ({"numNodes": 2, "resourcesPerNode": {"gpus": 8}}, (*gpu_nodes(1), *gpu_nodes(4, gpus=4)), Reason.NOT_ENOUGH_NODES,
     "2 nodes needed (one pod per node), 1 Ready node(s)"),
    ({"numNodes": 2, "resourcesPerNode": {"gpus": 8}, "podTemplate": {"nodeSelector": {"pool": "a100"}}},
     gpu_nodes(8), Reason.NOT_ENOUGH_NODES, "0 Ready node(s) match the job's node selector"),
    # Enough of them exist: the cluster is busy, and the scheduler's words say it best.
    ({"numNodes": 2, "resourcesPerNode": {"gpus": 8}}, gpu_nodes(8), Reason.UNSCHEDULABLE, SCHEDULER),
])
def test_an_unschedulable_job_says_what_the_nodes_show(spec: dict, nodes: tuple, reason: str, says: str) -> None:
    job = stored_job(spec.pop("numNodes", 2), **spec)
    verdict = explain_unschedulable(job, UNSCHEDULABLE, nodes)
    assert (verdict.phase, verdict.reason) == (Phase.PENDING, reason)
    assert says in verdict.message
    assert verdict.message.endswith(SCHEDULER)  # the scheduler's words stay


def test_other_verdicts_and_a_missing_node_list_are_left_alone() -> None:
    job = stored_job(2, resourcesPerNode={"gpus": 8})
    starting = Verdict(Phase.STARTING, Reason.PODS_STARTING, "1/2 pods running")
    assert explain_unschedulable(job, starting, CPU_NODES) is starting
    assert explain_unschedulable(job, UNSCHEDULABLE, ()) is UNSCHEDULABLE


def test_the_planner_reads_the_nodes_for_an_unschedulable_pod_and_reports_the_cause() -> None:
    job = stored_job(2, resourcesPerNode={"gpus": 8})
    pods = [pod(i, "Pending", node=None, unschedulable=SCHEDULER) for i in range(2)]
    result = run(job, pods, nodes=CPU_NODES)
    c = condition(result.status, "Running")
    assert (result.status.phase, c.reason) == (Phase.PENDING, "NoNodeOffersResource")
    assert "install its device plugin" in c.message


def test_the_controller_hands_the_nodes_over_only_when_a_pod_is_unschedulable() -> None:
    job = stored_job(2, resourcesPerNode={"gpus": 8}, failurePolicy={"restartStrategy": "BlockingRecreate"})
    assert needs_nodes(job, [pod(0, "Pending", node=None, unschedulable=SCHEDULER), pod(1)])
    assert not needs_nodes(job, [pod(0), pod(1, "Pending", node=None)])
