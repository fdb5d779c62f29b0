"""A kwok node fails (Ready False, kwok's node-not-ready stage; see localcluster/harness/kwoknodes.py for
why not a stopped heartbeat) on a cluster with stock node timings: the gang restarts without waiting for
Kubernetes' 300 s eviction, uncounted, the failed node's pod is force-deleted, and when the node's failure
is cleared nothing of the old attempt returns or counts. Outcomes only: how fast is the benchmark's
business (tools/bench/nodeloss.py, docs/benchmarks.md)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client

from localcluster.harness.kwoknodes import clear_failure, fail_nodes, ready_status
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from multinode.api import LABEL_ATTEMPT
from tests.support import jobs

NAME = "lossy"


@dataclass
class Lost:
    namespace: str
    node: str
    job: dict  # as it was once attempt 1 ran
    old_pod_gone_while_node_down: bool
    old_env: dict[str, str | None]
    new_pods: list
    events: list


def _env(core: client.CoreV1Api, pod: client.V1Pod) -> dict[str, str | None]:
    return jobs.pod_env(core, pod)


def _attempt_running(custom: client.CustomObjectsApi, ns: str, attempt: int) -> dict | None:
    job = jobs.get_job(custom, ns, NAME)
    status = job.get("status") or {}
    return job if status.get("attempt") == attempt and status.get("phase") == "Running" else None


def _pod_gone(core: client.CoreV1Api, ns: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, ns)
        return False
    except client.ApiException as e:
        if e.status == 404:
            return True
        raise


def _running_or_explain(custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str, attempt: int,
                        operator, timeout: float) -> dict:
    try:
        return wait_for(lambda: _attempt_running(custom, ns, attempt), timeout=timeout,
                        what=f"{NAME} attempt {attempt} Running")
    except AssertionError as e:
        pods = [(p.metadata.name, p.status.phase, p.spec.node_name) for p in jobs.job_pods(core, ns, NAME)]
        raise AssertionError(f"{e}\nstatus: {jobs.get_job(custom, ns, NAME).get('status')}\npods: {pods}\n"
                             f"operator log:\n{operator.log_tail(40)}") from None


@pytest.fixture(scope="module")
def lost(stock_cluster, stock_core: client.CoreV1Api, stock_namespace: str, stock_operator) -> Iterator[Lost]:
    """One job, one node killed under it, recovery awaited: the tests below judge what happened."""
    core, ns = stock_core, stock_namespace
    custom = client.CustomObjectsApi(stock_cluster.api_client())
    kubeconfig = str(stock_cluster.kubeconfig)
    # The recreate path: kwok runs no containers, so the other pod of an InPlace gang (the default on nodes that
    # declare the feature, as these do) would never restart in place.
    jobs.apply(kubeconfig, ns, training_job(NAME, 2, failurePolicy={"backoff": {"initialSeconds": 0},
                                                                    "restartStrategy": "BlockingRecreate"}))
    _running_or_explain(custom, core, ns, 0, stock_operator, timeout=90)
    old = core.read_namespaced_pod(f"{NAME}-1-a0", ns)
    node = old.spec.node_name
    old_env = _env(core, old)  # now: the next attempt deletes this attempt's shared env

    fail_nodes(core, [node])
    try:
        job = _running_or_explain(custom, core, ns, 1, stock_operator, timeout=180)
        gone = _pod_gone(core, ns, old.metadata.name) and ready_status(core, node) != "True"
        new_pods = [p for p in jobs.job_pods(core, ns, NAME) if p.metadata.labels[LABEL_ATTEMPT] == "1"]
        events = core.list_namespaced_event(ns).items
        yield Lost(ns, node, job, gone, old_env, new_pods, events)
    finally:
        clear_failure(core, [node])


def test_the_gang_restarts_on_other_nodes_without_counting(lost: Lost) -> None:
    status = lost.job["status"]
    assert (status["restarts"], status["uncountedRestarts"]) == (0, 1), status
    record = status["restartHistory"][-1]
    assert (record["reason"], record["counted"]) == ("NodeLost", False), record
    assert lost.node in record["message"] or f"{NAME}-1-a0" in record["message"], record
    assert len(lost.new_pods) == 2
    assert lost.node not in {p.spec.node_name for p in lost.new_pods}


def test_the_dead_nodes_pod_is_force_deleted_without_waiting_for_the_node(lost: Lost) -> None:
    assert lost.old_pod_gone_while_node_down, "the old pod was still in the API, or the node was back"
    forced = [e for e in lost.events if e.reason == "PodForceDeleted" and f"{NAME}-1-a0" in (e.message or "")]
    assert forced, [(e.reason, e.message) for e in lost.events]


def test_the_pods_tolerate_node_loss_for_seconds_not_five_minutes(lost: Lost) -> None:
    for pod in lost.new_pods:
        seconds = {t.key: t.toleration_seconds for t in pod.spec.tolerations or [] if t.effect == "NoExecute"}
        assert seconds == {"node.kubernetes.io/not-ready": 5, "node.kubernetes.io/unreachable": 5}, seconds


def test_the_node_coming_back_brings_nothing_of_the_old_attempt(
    lost: Lost, stock_cluster, stock_core: client.CoreV1Api
) -> None:
    # The fixture's teardown clears the node's failure too; here it is cleared first and judged.
    clear_failure(stock_core, [lost.node])
    custom = client.CustomObjectsApi(stock_cluster.api_client())
    job = wait_for(lambda: _attempt_running(custom, lost.namespace, 1), timeout=30, what="attempt 1 still Running")
    pods = jobs.job_pods(stock_core, lost.namespace, NAME)
    assert sorted(p.metadata.name for p in pods) == [f"{NAME}-0-a1", f"{NAME}-1-a1"]
    assert job["status"]["readyNodes"] == 2 and job["status"]["attempt"] == 1
    assert [ns["pod"] for ns in job["status"]["nodeStatuses"]] == [f"{NAME}-0-a1", f"{NAME}-1-a1"]
    # The fence: had the old pod's containers outlived the partition, they would knock on another port
    # under another rendezvous id than the new attempt's.
    new = _env(stock_core, next(p for p in lost.new_pods if p.metadata.name == f"{NAME}-1-a1"))
    assert new["MASTER_PORT"] != lost.old_env["MASTER_PORT"]
    assert new["MULTINODE_RDZV_ID"] != lost.old_env["MULTINODE_RDZV_ID"]
    assert new["MASTER_ADDR"] == lost.old_env["MASTER_ADDR"], "names stay stable across attempts"
