"""Fixtures of the controller's integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.harness.kueue import KueueProcess


@pytest.fixture(scope="module")
def kueue(kubeconfig: str, crd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KueueProcess]:
    """A real Kueue controller manager for one module, its CRDs removed again at the module's end: an operator
    started while they are installed follows Kueue's Workloads, so only the module's own operator must see
    them (the session operator asks at its start, when no module holds them)."""
    process = KueueProcess(kubeconfig, Path(tmp_path_factory.mktemp("kueue")))
    try:
        process.start()
        yield process
    finally:
        process.stop()
        process.uninstall()
