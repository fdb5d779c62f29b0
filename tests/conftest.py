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

REAL_NODES_GROUP = "real-nodes"


# Before xdist's own hook reads the groups (and after pytest-randomly's shuffle, a wrapper that runs first).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers by folder: everything under tests/integration, tests/localcluster or tests/bench needs the cluster
    (`integration`); tests/bench only measures (`bench`: `make bench-smoke`, not `make test`).

    Groups for `pytest -n 2 --dist loadgroup` (`make test`): a cluster test's module runs on one worker, so
    its module fixtures (a cluster of its own, a stock-timings operator) start once; every real-node test
    runs on one worker, since one real-node cluster may exist per host, and comes first: it is the longest
    group, and started last it would be the run's tail."""
    def folders(item: pytest.Item) -> tuple[str, ...]:
        # Relative to the repository: a clone under a folder named "bench" must not make every test a bench.
        return item.path.relative_to(item.config.rootpath).parts[:-1]

    for item in items:
        parts = folders(item)
        if "integration" in parts or "localcluster" in parts or "bench" in parts:
            item.add_marker(pytest.mark.integration)
            group = REAL_NODES_GROUP if "realnodes" in parts else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))
        if "bench" in parts:
            item.add_marker(pytest.mark.bench)
    items.sort(key=lambda item: "realnodes" not in folders(item))  # stable: the seed's order otherwise


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
