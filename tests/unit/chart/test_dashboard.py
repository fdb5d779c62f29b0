"""files/dashboard.json: valid Grafana JSON, the panels promised, and only metrics that exist."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry

from multinode.metrics.mirror_metrics import MirrorMetrics
from multinode.metrics.operator import OperatorMetrics
from tests.unit.chart.dashboard_metrics import (
    DASHBOARD, dashboard_exprs, dashboard_metric_families, dashboard_series, family_name, mirror_series,
    operator_series, panels,
)

# What the dashboard must show (one or more series each).
REQUIRED_SERIES = {
    "multinode_trainingjobs",                          # jobs by phase
    "multinode_pods_created_total",                    # pods created rate
    "multinode_restarts_total",                        # restarts by reason
    "multinode_reconcile_duration_seconds_bucket",     # reconcile p50/p99
    "multinode_job_pods_created_seconds_bucket",       # apply → all pods created
    "multinode_job_running_seconds_bucket",            # apply → Running
    "multinode_api_errors_total",                      # API errors
    "multinode_mirror_copied_bytes_total",             # mirror bytes copied
    "multinode_mirror_linked_bytes_total",             # mirror bytes linked
    "multinode_mirror_checkpoints_total",              # checkpoints mirrored
    "multinode_mirror_lag_seconds_bucket",             # mirror lag
    "multinode_trainingjob_goodput_seconds",           # goodput by job, lost seconds by cause
}


def exposed_series(registry: CollectorRegistry) -> set[str]:
    """Sample names a scrape of `registry` can contain, labelled series included (they may have no sample yet)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
                "summary": ("_sum", "_count", "")}
    return {family.name + s for family in registry.collect() for s in suffixes[family.type]}


def test_dashboard_is_valid_grafana_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    all_panels = list(panels(dashboard))
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in all_panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["targets"], panel
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"] == panel["datasource"]


def test_dashboard_shows_what_was_promised() -> None:
    assert REQUIRED_SERIES <= dashboard_series(), REQUIRED_SERIES - dashboard_series()
    exprs = "\n".join(dashboard_exprs())
    for quantile in ("0.5", "0.99"):
        for metric in ("multinode_reconcile_duration_seconds", "multinode_job_pods_created_seconds",
                       "multinode_job_running_seconds", "multinode_mirror_lag_seconds"):
            assert f"histogram_quantile({quantile}, sum by (le) (rate({metric}_bucket" in exprs, (quantile, metric)
    assert "sum by (reason" in exprs and "sum by (phase)" in exprs and "sum by (operation, code)" in exprs


def test_every_queried_series_is_exposed() -> None:
    """Names only, offline: the operator's and the mirror's registries, without running either."""
    operator = OperatorMetrics()
    operator.watch_state(dict, lambda: 0)
    assert operator_series() <= exposed_series(operator.registry), operator_series() - exposed_series(operator.registry)
    mirror = MirrorMetrics().registry
    assert mirror_series() <= exposed_series(mirror), mirror_series() - exposed_series(mirror)


def test_helper_names() -> None:
    assert family_name("multinode_pods_created_total") == "multinode_pods_created"
    assert family_name("multinode_reconcile_duration_seconds_bucket") == "multinode_reconcile_duration_seconds"
    assert family_name("multinode_trainingjobs") == "multinode_trainingjobs"
    assert "multinode_reconcile_duration_seconds" in dashboard_metric_families()
    assert dashboard_series() == operator_series() | mirror_series()
