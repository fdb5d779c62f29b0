"""The tiers, by folder: tests/unit (pure: neither the dev-cluster package nor the Kubernetes client),
tests/frameworks (real torch, HF, DeepSpeed from the envs localcluster installs; no cluster) and
tests/integration (the local cluster, whose fixtures live in tests/integration/conftest.py). Nothing here
imports the cluster, so `pytest -m "not integration"` never starts one."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# The marker each tier's tests get, by the folder under tests/ they live in.
TIER_MARKERS = {"integration": pytest.mark.integration, "frameworks": pytest.mark.frameworks}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.relative_to(TESTS).parts[0]
        if tier in TIER_MARKERS:
            item.add_marker(TIER_MARKERS[tier])
