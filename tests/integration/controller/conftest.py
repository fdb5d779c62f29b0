"""Fixtures of the controller's integration tests."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.harness.kueue import KueueProcess


@pytest.fixture(scope="module")
def kueue(kubeconfig: str, crd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KueueProcess]:
    """A real Kueue controller manager for one module, its CRDs removed again at the module's end: an operator
    started while they are installed follows Kueue's Workloads, so only the module's own operator must see
    them (the session operator asks at its start, when no module holds them).

    One module at a time on the cluster, whichever pytest-xdist worker runs it (a lock file beside the
    kubeconfig): the CRDs are cluster-wide, and a module that uninstalled them while another's ran took that
    one's ClusterQueues and Workloads with them."""
    with open(Path(kubeconfig).parent / "kueue-module.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, after the uninstall
        process = KueueProcess(kubeconfig, Path(tmp_path_factory.mktemp("kueue")))
        try:
            process.start()
            yield process
        finally:
            process.stop()
            process.uninstall()
