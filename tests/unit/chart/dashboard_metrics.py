"""The metric names files/dashboard.json queries, for tests that check them against what is exposed.

- dashboard_series(): names exactly as the PromQL uses them (`multinode_pods_created_total`,
  `multinode_reconcile_duration_seconds_bucket`): what a /metrics scrape must contain as sample names.
- dashboard_metric_families(): the same as metric family names, as prometheus_client's parser reports
  them (`_total` of counters and `_bucket`/`_sum`/`_count` of histograms removed).
- operator_/mirror_ variants split them by who exposes them: the operator, or the checkpoint mirror
  pods (`multinode_mirror_*`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from tests.support.paths import CHART_DIR

DASHBOARD = CHART_DIR / "files" / "dashboard.json"
MIRROR_PREFIX = "multinode_mirror_"
_METRIC = re.compile(r"\bmultinode_[a-zA-Z0-9_]+\b")
_SUFFIXES = ("_bucket", "_sum", "_count", "_total")


def panels(dashboard: dict) -> Iterator[dict]:
    """Every panel, including those nested in collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panels(panel)


def dashboard_exprs(path: Path = DASHBOARD) -> list[str]:
    dashboard = json.loads(path.read_text())
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", []) if t.get("expr")]


def dashboard_series(path: Path = DASHBOARD) -> set[str]:
    return {m for expr in dashboard_exprs(path) for m in _METRIC.findall(expr)}


def family_name(series: str) -> str:
    for suffix in _SUFFIXES:
        if series.endswith(suffix):
            return series[: -len(suffix)]
    return series


def dashboard_metric_families(path: Path = DASHBOARD) -> set[str]:
    return {family_name(s) for s in dashboard_series(path)}


def operator_series(path: Path = DASHBOARD) -> set[str]:
    return {s for s in dashboard_series(path) if not s.startswith(MIRROR_PREFIX)}


def mirror_series(path: Path = DASHBOARD) -> set[str]:
    return {s for s in dashboard_series(path) if s.startswith(MIRROR_PREFIX)}
