"""The tiers, by folder: tests/unit (pure: neither the dev-cluster package nor the Kubernetes client),
tests/frameworks (real torch, HF, DeepSpeed from the envs localcluster installs; no cluster) and
tests/integration (the local cluster, whose fixtures live in tests/integration/conftest.py) and tests/bench
(a toy-sized run of each benchmark, each starting a cluster of its own: `make bench-smoke`, not `make test`).
Nothing here imports the cluster, so `pytest -m "not integration and not bench"` never starts one."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# The marker each tier's tests get, by the folder under tests/ they live in.
TIER_MARKERS = {"integration": pytest.mark.integration, "frameworks": pytest.mark.frameworks,
                "bench": pytest.mark.bench}

REAL_NODES_GROUP = "real-nodes"


# Before xdist's own hook reads the groups (and after pytest-randomly's shuffle, a wrapper that runs first).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers by tier folder. Groups for `pytest -n 2 --dist loadgroup` (`make test`): a cluster test's module
    runs on one worker, so its module fixtures (a cluster of its own, a stock-timings operator) start once;
    every real-node test runs on one worker, since one real-node cluster may exist per host, and comes first:
    it is the longest group, and started last it would be the run's tail."""
    def folders(item: pytest.Item) -> tuple[str, ...]:
        return item.path.relative_to(TESTS).parts[:-1]

    for item in items:
        parts = folders(item)
        if parts and parts[0] in TIER_MARKERS:
            item.add_marker(TIER_MARKERS[parts[0]])
        if parts and parts[0] == "integration":
            group = REAL_NODES_GROUP if "realnodes" in parts else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: "realnodes" not in folders(item))  # stable: the seed's order otherwise
