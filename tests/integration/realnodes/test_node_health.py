"""The node health check on real nodes: one node's device plugin lists fewer GPU IDs than it allocates (a
node whose driver lost GPUs: the kubelet counts them allocated, the container does not see them). A job
whose first attempt lands there (the job is one node smaller than the cluster, one pod per node, and one good
node is cordoned while it schedules) fails its health check in the preflight, the node's verdict shows in
status.nodeStatuses, the node goes into status.excludedNodes, and the gang restarts on the good nodes, without
counting, and succeeds. With the check turned off, the same node runs the job."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from localcluster import LocalCluster

from localcluster.harness.kube import new_namespace
from localcluster.harness.waiting import wait_for
from multinode.api import GROUP, LABEL_ATTEMPT, LABEL_JOB_NAME, PLURAL, VERSION
from tests.support import jobs
from tests.support.realnodes import (ALL_BUT_ONE, clients, node_away_from_leader, pod_log, real_job, real_node_names,
                                    real_pod, wait_pod_done)

GPUS = 4  # per pod, of a node's 8
VISIBLE = 2  # what the bad node's plugin lets a container see
# The trainer reports the GPU IDs it was given: the same devices the health check saw.
SCRIPT = textwrap.dedent("""
    import os
    ids = [i for i in os.environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if i]
    print(f"trainer attempt={os.environ['MULTINODE_ATTEMPT']} host={os.environ['MULTINODE_HOST_NODE']} "
          f"gpus={len(ids)}", flush=True)
""")


@pytest.fixture
def bad_node(real_operator: tuple[LocalCluster, str]) -> Iterator[tuple[LocalCluster, str, str, list[str]]]:
    """(cluster, namespace, bad node, good nodes): the node without the leading operator lists only VISIBLE of
    the GPU IDs it allocates (checked with a probe pod) until the test ends; then it is restored."""
    cluster, operator_namespace = real_operator
    core, _ = clients(cluster)
    bad_index = node_away_from_leader(core, operator_namespace)
    assert cluster.real is not None
    node = cluster.real.nodes[bad_index]
    namespace = new_namespace(core, prefix="realhealth")
    probes = iter(range(1000))

    def probe_sees(count: int) -> bool:
        # The plugin re-reads its config every second: a pod allocated GPUs after that sees `count` IDs.
        name = f"probe-{next(probes)}"
        script = "import os; print(os.environ['NVIDIA_VISIBLE_DEVICES'])"
        core.create_namespaced_pod(namespace, real_pod(name, bad_index, script, gpus=GPUS))
        wait_pod_done(core, namespace, name)
        seen = pod_log(core, namespace, name).strip().split(",")
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        return len(seen) == count

    node.set_devices(node.pool.gpus_per_node, node.pool.rdma_per_node, visible_gpus=VISIBLE)
    try:
        wait_for(lambda: probe_sees(VISIBLE), timeout=60, interval=1,
                 what=f"{node.name}'s plugin to list {VISIBLE} GPU IDs")
        yield cluster, namespace, node.name, sorted(real_node_names() - {node.name})
    finally:
        node.set_devices(node.pool.gpus_per_node, node.pool.rdma_per_node)
        try:  # restored before the next test allocates GPUs there
            wait_for(lambda: probe_sees(GPUS), timeout=60, interval=1, what=f"{node.name}'s plugin restored")
        finally:
            core.delete_namespace(namespace)


def _attempt_pods(core: client.CoreV1Api, namespace: str, job: str, attempt: int) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={job},{LABEL_ATTEMPT}={attempt}").items


def _scheduled(core: client.CoreV1Api, namespace: str, job: str) -> set[str] | None:
    pods = _attempt_pods(core, namespace, job, 0)
    hosts = {p.spec.node_name for p in pods}
    return hosts if len(pods) == ALL_BUT_ONE and None not in hosts else None


def _start_on(core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, body: dict[str, Any],
              bad: str, goods: list[str]) -> list[str]:
    """Create the job while the first good node is cordoned, so attempt 0 lands on `bad` and the other good
    nodes (one pod per node); uncordon once it is placed. Returns those good nodes."""
    cordoned, *partners = goods
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        hosts = wait_for(lambda: _scheduled(core, namespace, body["metadata"]["name"]), timeout=120,
                         what="attempt 0 scheduled")
    finally:
        core.patch_node(cordoned, {"spec": {"unschedulable": False}})
    assert hosts == {bad, *partners}, hosts
    return partners


def _job(name: str, **spec: Any) -> dict[str, Any]:
    return real_job(name, ALL_BUT_ONE, SCRIPT, gpus=GPUS, shmSize="16Mi", **spec)


def test_a_node_failing_its_health_check_is_excluded_and_the_gang_succeeds_elsewhere(
        bad_node: tuple[LocalCluster, str, str, list[str]]) -> None:
    cluster, namespace, bad, goods = bad_node
    core, custom = clients(cluster)
    # The gang recreated on the good nodes (named: the default here is InPlace, and this trainer, which exits
    # without its peers, is no gang an in-place restart could take back; tests/unit/reconcile/test_in_place.py
    # has the in-place path of a node that fails its check).
    policy = {"maxRestarts": 0, "backoff": {"initialSeconds": 8}, "restartStrategy": "BlockingRecreate"}
    _start_on(core, custom, namespace, _job("sick", failurePolicy=policy), bad, goods)

    def verdict_and_exclusion() -> dict | None:
        # The node table may show the verdict a moment before the pod's phase turns Failed and the
        # attempt fails; the exclusion comes with that, and the verdict row stays through the backoff.
        status = jobs.get_job(custom, namespace, "sick").get("status") or {}
        failed = [ns for ns in status.get("nodeStatuses", []) if (ns.get("health") or {}).get("status") == "Failed"]
        return status if failed and status.get("excludedNodes") else None

    status = wait_for(verdict_and_exclusion, timeout=120,
                      what="a failed health verdict in status.nodeStatuses and the node in status.excludedNodes")
    [row, *_] = [ns for ns in status["nodeStatuses"] if (ns.get("health") or {}).get("status") == "Failed"]
    assert (row["node"], row["reason"], row["health"]["reason"]) == (bad, "NodeUnhealthy", "GPUsNotVisible"), status
    expected = f"{GPUS} GPUs requested, fewer visible: {VISIBLE} in NVIDIA_VISIBLE_DEVICES="
    assert row["health"]["message"].startswith(expected)
    [excluded] = status["excludedNodes"]
    assert (excluded["node"], excluded["reason"]) == (bad, "GPUsNotVisible"), status

    job = jobs.wait_phase(custom, namespace, "sick", "Succeeded", timeout=180)
    status = job["status"]
    # maxRestarts 0: the restart did not count, an unhealthy node is not the job's fault.
    assert (status["attempt"], status.get("restarts", 0), status["uncountedRestarts"]) == (1, 0, 1), status
    assert status["restartHistory"][0]["reason"] == "NodeUnhealthy" and not status["restartHistory"][0]["counted"]
    assert [e["node"] for e in status["excludedNodes"]] == [bad]
    assert sorted(ns["node"] for ns in status["nodeStatuses"]) == goods
    assert all(ns["health"] == {"status": "Passed", "reason": "Healthy"} for ns in status["nodeStatuses"]), status
    for pod in _attempt_pods(core, namespace, "sick", 1):
        terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        assert [(f.key, f.operator, f.values) for f in terms[0].match_fields] == [("metadata.name", "NotIn", [bad])]
        assert pod.spec.node_name in goods
        assert f"trainer attempt=1 host={pod.spec.node_name} gpus={GPUS}" in pod_log(core, namespace, pod.metadata.name)
        preflight = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="preflight")
        assert f"node health check passed: {GPUS} GPUs visible, /dev/shm >= {16 * 2**20} bytes" in preflight
    # Failed pods stay (cleanPodPolicy Running); a peer still in its preflight was deleted with the gang.
    failed = [p for p in _attempt_pods(core, namespace, "sick", 0) if p.status.phase == "Failed"]
    assert failed
    logs = " ".join(core.read_namespaced_pod_log(p.metadata.name, namespace, container="preflight") for p in failed)
    assert "node health check failed: GPUsNotVisible" in logs
    events = core.list_namespaced_event(namespace, field_selector="reason=NodeUnhealthy").items
    assert any(bad in e.message for e in events), [e.message for e in events]


def test_with_the_check_turned_off_the_same_node_runs_the_job(
        bad_node: tuple[LocalCluster, str, str, list[str]]) -> None:
    cluster, namespace, bad, goods = bad_node
    core, custom = clients(cluster)
    partners = _start_on(core, custom, namespace, _job("trusting", healthCheck={"enabled": False}), bad, goods)

    job = jobs.wait_phase(custom, namespace, "trusting", "Succeeded", timeout=180)
    status = job["status"]
    assert status.get("attempt", 0) == 0 and not status.get("excludedNodes"), json.dumps(status)
    assert all("health" not in ns for ns in status["nodeStatuses"])
    # No check: the trainer on the bad node runs with the GPUs it cannot see; its peers see all of their own.
    seen = {pod.spec.node_name: pod_log(core, namespace, pod.metadata.name)
            for pod in _attempt_pods(core, namespace, "trusting", 0)}
    assert f"host={bad} gpus={VISIBLE}" in seen[bad], seen
    assert all(f"host={node} gpus={GPUS}" in seen[node] for node in partners), seen
