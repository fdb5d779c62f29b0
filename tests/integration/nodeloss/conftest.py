"""A cluster of their own for the node-loss tests: stock node timings (40 s grace, 300 s default
tolerations), as users run, which the session cluster's short timings would hide."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from localcluster import ClusterConfig, LocalCluster, NodePoolConfig

from localcluster.harness.clusters import own_cluster
from localcluster.harness.kube import kubectl, new_namespace
from localcluster.harness.operator import CRD_FILE, OperatorProcess
from localcluster.harness.waiting import wait_for
from multinode.api import CRD_NAME, GROUP, PLURAL, VERSION

NAMESPACE_PREFIX = "nl"


@pytest.fixture(scope="module")
def stock_cluster() -> Iterator[LocalCluster]:
    config = ClusterConfig(name=f"pytest-stock-{os.getpid()}", die_with_parent=True, timings="stock",
                           nodes=NodePoolConfig(count=4))
    with own_cluster(config) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def stock_core(stock_cluster: LocalCluster) -> client.CoreV1Api:
    return client.CoreV1Api(stock_cluster.api_client())


@pytest.fixture(scope="module")
def stock_operator(stock_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    kubeconfig = str(stock_cluster.kubeconfig)
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    extensions = client.ApiextensionsV1Api(stock_cluster.api_client())
    wait_for(lambda: any(c.type == "Established" and c.status == "True"
                         for c in extensions.read_custom_resource_definition(CRD_NAME).status.conditions or []),
             timeout=60, what=f"CRD {CRD_NAME} Established")
    # Established is not yet served: right after, lists answer 429 "storage is (re)initializing", and an
    # operator started then was seen never to watch TrainingJobs at all. Wait until a list succeeds.
    custom = client.CustomObjectsApi(stock_cluster.api_client())
    wait_for(lambda: _lists(custom), timeout=60, what="TrainingJobs listed")
    op = OperatorProcess(kubeconfig, [f"{NAMESPACE_PREFIX}-*"],
                         Path(tmp_path_factory.mktemp("stock-operator")) / "operator.log")
    op.start()
    yield op
    op.stop()


def _lists(custom: client.CustomObjectsApi) -> bool:
    try:
        custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1)
        return True
    except client.ApiException as e:
        if e.status in (404, 429, 503):
            return False
        raise


@pytest.fixture(scope="module")
def stock_namespace(stock_core: client.CoreV1Api, stock_operator: OperatorProcess) -> Iterator[str]:
    name = new_namespace(stock_core, prefix=NAMESPACE_PREFIX)
    yield name
    stock_core.delete_namespace(name)
