"""An operator killed in the middle of creating a gang converges, after restart, to exactly N pods."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from multinode.api import LABEL_NODE_INDEX
from multinode.testing import training_job
from tests.support import jobs
from localcluster.harness.kube import new_namespace
from localcluster.harness.operator import OperatorProcess
from localcluster.harness.waiting import wait_for
from localcluster.nodes import POOL_LABEL
from localcluster import LocalCluster
from tests.support.nodepools import own_pool

NUM_NODES = 100


@pytest.fixture
def own_namespace(core: client.CoreV1Api, crd: str) -> Iterator[str]:
    # Not watched by the session operator (it watches t-*): this test owns the only operator here.
    name = new_namespace(core, prefix="restart")
    yield name
    core.delete_namespace(name)


def test_operator_sigkilled_mid_creation_leaves_exactly_n_pods(
    local_cluster: LocalCluster, core: client.CoreV1Api, api: client.ApiClient, kubeconfig: str,
    own_namespace: str, tmp_path: Path
) -> None:
    # One pod per node: the job gets a fake node for each of its pods, of a pool of its own.
    with own_pool(local_cluster, core, "restart", count=NUM_NODES) as pool:
        _kill_mid_creation_then_converge(core, api, kubeconfig, own_namespace, tmp_path, pool.prefix)


def _kill_mid_creation_then_converge(core: client.CoreV1Api, api: client.ApiClient, kubeconfig: str, ns: str,
                                     tmp_path: Path, pool: str) -> None:
    custom = client.CustomObjectsApi(api)
    # One API call at a time makes creation take long enough to be interrupted for sure.
    slow = {"MULTINODE_API_CONCURRENCY": "1"}
    first = OperatorProcess(kubeconfig, [ns], tmp_path / "first.log", extra_env=slow)
    first.start()
    try:
        # A CPU job: 100 pods fit the fake nodes without GPUs, so all of them can run.
        jobs.apply(kubeconfig, ns, training_job("big", NUM_NODES, gpus=0,
                                                podTemplate={"nodeSelector": {POOL_LABEL: pool}}))
        # Killed at the first pod seen, polled often: the creates run at up to ~200 pods/s, and a run that
        # waited for 10 pods at a 0.2 s poll once found all 100 made before the kill (seed 1811090283).
        wait_for(lambda: jobs.job_pods(core, ns, "big"), timeout=60, interval=0.02, what="the first pods created")
        first.kill()
    finally:
        first.stop()
    created_before_kill = len(jobs.job_pods(core, ns, "big"))
    assert created_before_kill < NUM_NODES, "the operator must be killed while it is still creating pods"

    second = OperatorProcess(kubeconfig, [ns], tmp_path / "second.log")
    second.start()
    try:
        jobs.wait_phase(custom, ns, "big", "Running", timeout=120)
        pods = jobs.job_pods(core, ns, "big")
    finally:
        second.stop()

    indices = Counter(int(p.metadata.labels[LABEL_NODE_INDEX]) for p in pods)
    assert len(pods) == NUM_NODES
    assert sorted(indices) == list(range(NUM_NODES)) and max(indices.values()) == 1, "no index twice"
    job_uid = jobs.get_job(custom, ns, "big")["metadata"]["uid"]
    assert all(p.metadata.owner_references[0].uid == job_uid for p in pods), "no orphans"
