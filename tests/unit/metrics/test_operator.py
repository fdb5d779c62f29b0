"""The operator's per-job goodput metrics: gauges computed at scrape from the figures the controller keeps."""

from __future__ import annotations

from prometheus_client import generate_latest

from multinode.metrics.operator import JobFigures, OperatorMetrics
from tests.support.packaging import PROJECT_VERSION


def samples(metrics: OperatorMetrics, family: str) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels.values()): s.value for f in metrics.registry.collect() if f.name == family
            for s in f.samples}


def test_goodput_is_a_gauge_per_job_kind_and_cause() -> None:
    figures = [JobFigures("ml", "llama", 3600, {"scheduling": 60, "restart": 12, "redone": 300}, step=4200),
               JobFigures("ml", "tiny", 5)]
    metrics = OperatorMetrics()
    metrics.watch_state(dict, lambda: 0, lambda: figures)

    goodput = samples(metrics, "multinode_trainingjob_goodput_seconds")
    assert goodput == {("ml", "llama", "productive", ""): 3600, ("ml", "llama", "lost", "redone"): 300,
                       ("ml", "llama", "lost", "restart"): 12, ("ml", "llama", "lost", "scheduling"): 60,
                       ("ml", "tiny", "productive", ""): 5}
    # A job without a step has no step series (0 would read as "at step 0").
    assert samples(metrics, "multinode_trainingjob_step") == {("ml", "llama"): 4200}
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE multinode_trainingjob_goodput_seconds gauge" in text
    assert 'multinode_trainingjob_goodput_seconds{cause="redone",job="llama",kind="lost",namespace="ml"} 300.0' in text

    # Productive seconds may go down (a restart turns work into redone): a gauge shows that as it is.
    figures[0] = JobFigures("ml", "llama", 3300, {"scheduling": 60, "restart": 12, "redone": 600}, step=4200)
    assert samples(metrics, "multinode_trainingjob_goodput_seconds")[("ml", "llama", "productive", "")] == 3300


def test_a_deleted_job_leaves_no_series() -> None:
    figures = {"uid-1": JobFigures("ml", "llama", 10)}
    metrics = OperatorMetrics()
    metrics.watch_state(dict, lambda: 0, lambda: list(figures.values()))
    assert samples(metrics, "multinode_trainingjob_goodput_seconds")
    figures.clear()
    assert samples(metrics, "multinode_trainingjob_goodput_seconds") == {}


def test_build_info_is_1_labelled_with_the_project_version() -> None:
    metrics = OperatorMetrics()
    assert samples(metrics, "multinode_build_info") == {(PROJECT_VERSION,): 1.0}
    assert f'multinode_build_info{{version="{PROJECT_VERSION}"}} 1.0' in generate_latest(metrics.registry).decode()
