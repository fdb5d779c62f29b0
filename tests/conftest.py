"""The tiers, by folder: tests/unit (pure: neither the dev-cluster package nor the Kubernetes client),
tests/frameworks (real torch, HF, DeepSpeed from the envs localcluster installs; no cluster) and
tests/integration (the local cluster, whose fixtures live in tests/integration/conftest.py) and tests/bench
(a toy-sized run of each benchmark, each starting a cluster of its own: `make bench-smoke`, not `make test`).
Nothing here imports the cluster, so `pytest -m "not integration and not bench"` never starts one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
# The marker each tier's tests get, by the folder under tests/ they live in.
TIER_MARKERS = {"integration": pytest.mark.integration, "frameworks": pytest.mark.frameworks,
                "bench": pytest.mark.bench}

# Where the real-node tests live: one group for the scheduler below.
REAL_NODE_TESTS = "tests/integration/realnodes/"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test gets its tier's marker, by the folder under tests/ it lives in. The real-node tests go first
    (after pytest-randomly's shuffle, a wrapper that runs before this): the longest group, which started last
    would be the run's tail (see the scheduler below)."""
    def folders(item: pytest.Item) -> tuple[str, ...]:
        return item.path.relative_to(TESTS).parts[:-1]

    for item in items:
        parts = folders(item)
        if parts and parts[0] in TIER_MARKERS:
            item.add_marker(TIER_MARKERS[parts[0]])
    items.sort(key=lambda item: "realnodes" not in folders(item))  # stable: the seed's order otherwise


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`pytest -n 2 --dist loadscope` (make test's integration tier): a module's tests stay on one worker, so its
    module fixtures (a cluster of its own, a stock-timings operator) start once, and every real-node test runs on
    one worker, since one real-node cluster may exist per host. (xdist's own `loadgroup` marks a group by a suffix
    to the test's nodeid, which pytest 9 no longer lets a plugin change: it grouped nothing.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleOrRealNodes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::")[0]
            return REAL_NODE_TESTS if module.startswith(REAL_NODE_TESTS) else module

    return ModuleOrRealNodes(config, log)
