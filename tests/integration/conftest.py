"""The integration tier's fixtures: the local control plane (started once per session, on first use), and for
tests that run the operator: the CRD, the mirrors' ClusterRole, and one operator process for the session.

MULTINODE_REUSE_CLUSTER=1 reuses the cluster of `make cluster-up` (name `default`) when it runs, and leaves it
running afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from localcluster import ClusterConfig, LocalCluster

from localcluster.harness.clusters import own_cluster
from localcluster.harness.kube import kubectl, new_namespace
from localcluster.harness.operator import CRD_FILE, OperatorProcess
from localcluster.harness.waiting import wait_for
from multinode.api import CRD_NAME
from multinode.render import DEFAULT_MIRROR_CLUSTER_ROLE
from tests.support.binaries import KUBE_VERSION
from tests.support.chart import helm
from tests.support.paths import CHART_DIR


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


# The session operator watches only namespaces with this prefix; tests that need an operator of their
# own (restart, RBAC identities) use other prefixes, so two operators never handle the same job. Each
# pytest-xdist worker has a session operator of its own, so the prefix names the worker too: with one
# prefix for both, the two operators raced for every job (and a test reading its operator's metrics saw
# what the other had done).
SHARED_OPERATOR_NS_PREFIX = "t" + os.environ.get("PYTEST_XDIST_WORKER", "")


@pytest.fixture(scope="session")
def crd(kubeconfig: str, api: client.ApiClient) -> str:
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    # Polled, not `kubectl wait`: on a fresh cluster (a test file run alone) the CRD can still have no
    # status.conditions at all, and kubectl wait fails on that at once instead of waiting.
    extensions = client.ApiextensionsV1Api(api)

    def established() -> bool:
        conditions = extensions.read_custom_resource_definition(CRD_NAME).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(established, timeout=60, what=f"CRD {CRD_NAME} Established")
    return str(CRD_FILE)


@pytest.fixture(scope="session")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture(scope="session")
def mirror_cluster_role(kubeconfig: str) -> str:
    """The chart's mirror ClusterRole and the policy that keeps each mirror to its own job's status, as a release
    named multinode-operator installs them: the operator binds every job's mirror to that ClusterRole."""
    manifest = helm("template", "multinode-operator", str(CHART_DIR), "--kube-version", KUBE_VERSION,
                    "--show-only", "templates/mirror-rbac.yaml").stdout
    assert f"name: {DEFAULT_MIRROR_CLUSTER_ROLE}\n" in manifest, manifest
    kubectl(kubeconfig, "apply", "-f", "-", input=manifest)
    return DEFAULT_MIRROR_CLUSTER_ROLE


@pytest.fixture(scope="session")
def operator(kubeconfig: str, crd: str, mirror_cluster_role: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    log_path = Path(tmp_path_factory.mktemp("operator")) / "operator.log"
    op = OperatorProcess(kubeconfig, [f"{SHARED_OPERATOR_NS_PREFIX}-*"], log_path)
    op.start()
    yield op
    op.stop()


@pytest.fixture
def job_namespace(core: client.CoreV1Api, operator: OperatorProcess) -> Iterator[str]:
    """A fresh namespace the session operator watches."""
    name = new_namespace(core, prefix=SHARED_OPERATOR_NS_PREFIX)
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def module_job_namespace(core: client.CoreV1Api, operator: OperatorProcess) -> Iterator[str]:
    """A namespace the session operator watches, for a module fixture that several tests judge."""
    name = new_namespace(core, prefix=SHARED_OPERATOR_NS_PREFIX)
    yield name
    core.delete_namespace(name)
