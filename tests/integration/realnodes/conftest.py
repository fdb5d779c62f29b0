"""Fixtures for tests on real nodes: the session's real-node cluster and clients of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from localcluster import LocalCluster

from localcluster.harness.kube import new_namespace
from tests.support.realnodes import RealClusterSlot


@pytest.fixture(scope="session")
def real_slot() -> Iterator[RealClusterSlot]:
    slot = RealClusterSlot()
    yield slot
    slot.release()


@pytest.fixture
def real_cluster(real_slot: RealClusterSlot) -> LocalCluster:
    return real_slot.get()


@pytest.fixture
def real_core(real_cluster: LocalCluster) -> client.CoreV1Api:
    return client.CoreV1Api(real_cluster.api_client())


@pytest.fixture
def real_namespace(real_core: client.CoreV1Api) -> Iterator[str]:
    name = new_namespace(real_core, prefix="real")
    yield name
    real_core.delete_namespace(name)


@pytest.fixture
def real_operator(real_slot: RealClusterSlot) -> tuple[LocalCluster, str]:
    """The real-node cluster with the operator installed by helm (values-local.yaml) on a real node."""
    return real_slot.operator()


@pytest.fixture
def operator_namespace(request: pytest.FixtureRequest,
                       real_operator: tuple[LocalCluster, str]) -> Iterator[tuple[LocalCluster, str]]:
    """A namespace on the real-node cluster whose operator (installed by helm) runs its jobs; the namespace
    is named after the test module and deleted afterwards."""
    cluster, _ = real_operator
    core = client.CoreV1Api(cluster.api_client())
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "")
    namespace = new_namespace(core, prefix=f"real{module[:12]}")
    yield cluster, namespace
    core.delete_namespace(namespace)
