"""Session fixtures. The local control plane starts once per test session, on first use.

MULTINODE_REUSE_CLUSTER=1 reuses the cluster of `make cluster-up` (name `default`) when it runs,
and leaves it running afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from kubernetes import client
from localcluster import ClusterConfig, LocalCluster

from localcluster.harness.clusters import own_cluster
from localcluster.harness.kube import new_namespace


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/integration or tests/localcluster needs the cluster.
    for item in items:
        parts = item.path.parts
        if "integration" in parts or "localcluster" in parts:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    if os.environ.get("MULTINODE_REUSE_CLUSTER") == "1":
        shared = LocalCluster(ClusterConfig(name="default"))
        if shared.is_running():
            yield shared
            return
    with own_cluster(ClusterConfig(name=f"pytest-{os.getpid()}", die_with_parent=True)) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kubeconfig(local_cluster: LocalCluster) -> str:
    return str(local_cluster.kubeconfig)


@pytest.fixture(scope="session")
def api(local_cluster: LocalCluster) -> client.ApiClient:
    return local_cluster.api_client()


@pytest.fixture(scope="session")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = new_namespace(core)
    yield name
    core.delete_namespace(name)
