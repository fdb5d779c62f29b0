"""Fixtures for tests that run the operator: the CRD, and one operator process for the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from localcluster.harness.kube import kubectl, new_namespace
from localcluster.harness.operator import CRD_FILE, OperatorProcess

# The session operator watches only namespaces with this prefix; tests that need an operator of their
# own (restart, RBAC identities) use other prefixes, so two operators never handle the same job.
SHARED_OPERATOR_NS_PREFIX = "t"


@pytest.fixture(scope="session")
def crd(kubeconfig: str) -> str:
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "crd/trainingjobs.multinode.dev")
    return str(CRD_FILE)


@pytest.fixture(scope="session")
def operator(kubeconfig: str, crd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
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
