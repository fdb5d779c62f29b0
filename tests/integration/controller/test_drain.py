"""`kubectl drain` of a node (kwok, a pool of its own) with two jobs on it, and the session operator: a
checkpointed job whose trainer never answers holds the drain only until beforeDisruptionSeconds, with a
reason, and `multinode checkpoint --wait` says the request timed out; a job without checkpointing is evicted
at once, as before. The real trainer that answers, under the chart's RBAC and admission policies, is
tests/integration/realnodes/test_drain.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from localcluster import LocalCluster

from localcluster.harness.drain import BUDGET_REFUSED, draining
from multinode.testing import training_job
from tests.support import jobs
from tests.support.cli import cli
from tests.support.nodepools import on_pool, own_pool

CLAIMS = ("cache", "ckpt")


@pytest.fixture
def drain_node(local_cluster: LocalCluster, core: client.CoreV1Api) -> Iterator[tuple[str, str]]:
    """(pool label value, node name): one Ready kwok node of a pool of its own, deleted afterwards."""
    with own_pool(local_cluster, core, "drain", count=1) as pool:
        yield pool.prefix, pool.names[0]


@pytest.fixture
def claims(core: client.CoreV1Api, job_namespace: str) -> Iterator[None]:
    """The cache and checkpoint claims, bound to volumes of their own: kwok pods mount nothing, but the
    scheduler places no pod whose claim is unbound."""
    for claim in CLAIMS:
        core.create_persistent_volume({
            "metadata": {"name": f"{job_namespace}-{claim}"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "manual",
                     "hostPath": {"path": f"/nonexistent/{job_namespace}/{claim}"},
                     "claimRef": {"namespace": job_namespace, "name": claim}}})
        core.create_namespaced_persistent_volume_claim(job_namespace, {
            "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "manual",
                     "volumeName": f"{job_namespace}-{claim}", "resources": {"requests": {"storage": "1Gi"}}}})
    yield
    for claim in CLAIMS:
        core.delete_persistent_volume(f"{job_namespace}-{claim}")


def _status(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    return jobs.get_job(custom, namespace, name).get("status") or {}


def test_a_trainer_that_never_answers_holds_a_drain_only_to_the_limit_and_no_checkpointing_not_at_all(
        custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str, drain_node: tuple[str, str],
        claims: None) -> None:
    ns, (pool, node) = job_namespace, drain_node
    here = on_pool(pool)
    ignorer = training_job("ignorer", 1, gpus=1, podTemplate=here, cache={"claimName": "cache"},
                           checkpointing={"claimName": "ckpt", "beforeDisruptionSeconds": 5})
    plain = training_job("plain", 1, gpus=1, podTemplate=here)
    for body in (ignorer, plain):
        jobs.apply(kubeconfig, ns, body)
    for name in ("ignorer", "plain"):
        jobs.wait_phase(custom, ns, name, "Running", timeout=60)

    # A user's request first: `multinode checkpoint --wait` says the trainer never answered (exit 2).
    asked = cli(kubeconfig, "checkpoint", "ignorer", "-n", ns, "--wait", "--timeout", "60")
    assert asked.returncode == 2 and "timed out" in asked.stderr, asked
    request = _status(custom, ns, "ignorer")["checkpointRequest"]
    assert (request["reason"], request["state"]) == ("UserRequested", "TimedOut"), request
    assert _status(custom, ns, "ignorer")["attempt"] == 0, "a user's request restarts nothing"
    refused = cli(kubeconfig, "checkpoint", "plain", "-n", ns)
    assert refused.returncode == 1 and "no spec.checkpointing" in refused.stderr, refused

    with draining(kubeconfig, node) as drain:
        code, output = drain.wait(timeout=120)
    assert code == 0, output
    held = [line for line in output.splitlines() if BUDGET_REFUSED in line]
    assert any("ignorer-0-a0" in line for line in held), output
    assert not any("plain-0-a0" in line for line in held), output

    status = _status(custom, ns, "ignorer")
    assert (status["checkpointRequest"]["reason"], status["checkpointRequest"]["state"]) == ("NodeCordoned", "TimedOut")
    record = status["restartHistory"][-1]
    assert (record["reason"], record["counted"]) == ("NodeDrained", False)
    assert "CheckpointRequestTimedOut" in record["message"]

    plain_status = _status(custom, ns, "plain")
    assert "checkpointRequest" not in plain_status
    assert plain_status["restartHistory"][-1]["reason"] == "NodeLost", "evicted at once, as before"
    budgets = client.PolicyV1Api(custom.api_client).list_namespaced_pod_disruption_budget(ns).items
    assert [b.metadata.name for b in budgets] == ["ignorer"]
