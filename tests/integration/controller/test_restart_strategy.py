"""failurePolicy.restartStrategy unset (reconcile/restart_strategy.py): InPlace where every node that could host
the job declares RestartAllContainersOnContainerExits, as a 1.36 kubelet does (the cluster's kwok nodes do);
BlockingRecreate on nodes of older kubelets, where the scheduler would keep an InPlace job's pods off."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from localcluster import LocalCluster

from multinode.testing import training_job
from tests.support import jobs
from tests.support.nodepools import Pool, on_pool, own_pool
from localcluster.harness.waiting import wait_for


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def old_kubelets(local_cluster: LocalCluster, core: client.CoreV1Api) -> Iterator[Pool]:
    """Nodes whose kubelet declares no features (older than Kubernetes 1.36)."""
    with own_pool(local_cluster, core, "old-kubelet", count=2, declared_features=()) as pool:
        yield pool


def _restart_rules(pod: client.V1Pod) -> list:
    trainer = pod.to_dict()["spec"]["containers"][0]
    return trainer.get("restart_policy_rules") or []


def test_an_unset_strategy_restarts_in_place_where_the_nodes_serve_it(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    jobs.apply(kubeconfig, ns, training_job("default", 2))
    job = jobs.wait_phase(custom, ns, "default", "Running")
    assert "restartStrategy" not in job["spec"]["failurePolicy"], "the user's spec is left as written"
    assert job["status"]["restartStrategy"] == "InPlace"
    kept = wait_for(lambda: jobs.condition(jobs.get_job(custom, ns, "default"), "InPlaceRestarts"), timeout=30,
                    what="InPlaceRestarts")
    assert (kept["status"], kept["reason"]) == ("True", "RestartRulesKept"), kept
    pods = jobs.job_pods(core, ns, "default")
    assert len(pods) == 2 and all(_restart_rules(p) for p in pods), [p.metadata.name for p in pods]


def test_an_unset_strategy_recreates_on_nodes_of_older_kubelets_where_in_place_would_not_schedule(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str,
    old_kubelets: Pool,
) -> None:
    ns = job_namespace
    jobs.apply(kubeconfig, ns, training_job("older", 2, podTemplate=on_pool(old_kubelets.prefix)))
    job = jobs.wait_phase(custom, ns, "older", "Running")
    assert job["status"]["restartStrategy"] == "BlockingRecreate"
    said = jobs.condition(job, "InPlaceRestarts")
    assert (said["status"], said["reason"]) == ("False", "NodesLackInPlaceRestarts"), said
    assert "2 of 2 Ready nodes that fit the job" in said["message"] and old_kubelets.names[0] in said["message"]
    pods = jobs.job_pods(core, ns, "older")
    assert {p.spec.node_name for p in pods} == set(old_kubelets.names)
    assert not any(_restart_rules(p) for p in pods)

    # What the default spares the job: asked for, InPlace leaves its pods unschedulable on these nodes.
    # (No GPUs: the job above holds them all.)
    jobs.apply(kubeconfig, ns, training_job("asked", 1, gpus=0, podTemplate=on_pool(old_kubelets.prefix),
                                            failurePolicy={"restartStrategy": "InPlace"}))

    def unschedulable() -> str | None:
        pods = jobs.job_pods(core, ns, "asked")
        scheduled = [c for p in pods for c in p.status.conditions or [] if c.type == "PodScheduled"]
        return next((c.message for c in scheduled if c.status == "False" and c.reason == "Unschedulable"), None)

    message = wait_for(unschedulable, timeout=60, what="the InPlace pod Unschedulable")
    assert "required features" in message, message
