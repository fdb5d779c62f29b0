"""The pinned tools `make binaries` builds (helm, kubectl), for tests that run them without a cluster.

The one module of the unit tier's support that reaches into the dev-cluster package, and only for where its
build puts a binary and which Kubernetes version it pins (tests/unit/test_tiers.py holds it to that).
"""

from __future__ import annotations

import pytest
from localcluster import binaries

# helm built without its version ldflags assumes Kubernetes v1.20 for `helm template`; the chart needs ≥ 1.30.
KUBE_VERSION = binaries.read_versions()["KUBE_VERSION"]


def pinned(name: str) -> str:
    """The path of the pinned `name` (a field of localcluster.binaries.Binaries); fails the test when unbuilt."""
    path = getattr(binaries.locate(), name)
    if not path.exists():
        pytest.fail(f"the pinned {name} is not built ({path}): run `make binaries` (make test does)")
    return str(path)
