"""The scaling test's arithmetic, table and plot, from plain heartbeat lines."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from multinode.cli.scaling import report_table
from multinode.cli.svg import scaling_svg
from multinode.client.logs import LogLine
from multinode.client.scaling import Heartbeat, analyse, job_throughput, parse_heartbeat, sized


def test_heartbeat_lines_are_found_among_other_output() -> None:
    assert parse_heartbeat("multinode heartbeat step=120 samples_per_second=812.5") == Heartbeat(120, 812.5)
    assert parse_heartbeat("step=3 loss=0.1 samples_per_second=1e3 extra=x") == Heartbeat(3, 1000.0)
    for other in ("step 3 samples/s 10", "warmup_step=3 samples_per_second=2", "step=3", "samples_per_second=2"):
        assert parse_heartbeat(other) is None


def test_a_jobs_throughput_is_the_sum_of_each_ranks_median_after_warm_up() -> None:
    lines = [LogLine(0, 0, "p0", f"step={i} samples_per_second={v}") for i, v in enumerate([5, 100, 110, 90])]
    lines += [LogLine(1, 0, "p1", f"step={i} samples_per_second={v}") for i, v in enumerate([1, 50, 60])]
    lines += [LogLine(1, 0, "p1", "loss 0.3")]
    assert job_throughput(lines) == (100 + 55, 7)
    assert job_throughput([LogLine(0, 0, "p", "step=1 samples_per_second=42")]) == (42, 1)
    assert job_throughput([]) == (0.0, 0)


def test_efficiency_is_against_linear_from_the_smallest_size_and_the_verdict_against_the_target() -> None:
    report = analyse({4: (360.0, 10), 1: (100.0, 10), 2: (190.0, 10)}, target=0.9)
    assert [(r.nodes, round(r.speedup, 2), round(r.efficiency, 3)) for r in report.results] == [
        (1, 1.0, 1.0), (2, 1.9, 0.95), (4, 3.6, 0.9)]
    assert report.passed and report.as_dict()["verdict"] == "PASS"
    assert not analyse({1: (100.0, 1), 8: (600.0, 1)}).passed  # 75% < 80%
    table = report_table(analyse({1: (100.0, 1), 8: (600.0, 1)}))
    assert table.splitlines() == ["NODES   SAMPLES/S   SPEEDUP   EFFICIENCY   VERDICT",
                                  "1       100.0       1.00x     100%         ok",
                                  "8       600.0       6.00x     75%          below target",
                                  "verdict: FAIL (target 80% of linear scaling from 1 node)"]


def test_the_plot_is_well_formed_svg_with_a_point_per_size() -> None:
    report = analyse({1: (100.0, 3), 2: (150.0, 3), 4: (200.0, 3)})
    svg = scaling_svg(report, "llama <test> & co")
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg"
    titles = [c.find(f"{ns}title").text for c in root.iter(f"{ns}circle")]  # type: ignore[union-attr]
    assert titles == ["1 nodes: 100.0 samples/s, 100% of linear", "2 nodes: 150.0 samples/s, 75% of linear",
                      "4 nodes: 200.0 samples/s, 50% of linear"]
    assert "llama &lt;test&gt; &amp; co" in svg and ">FAIL<" in svg


def test_each_size_is_a_job_of_its_own() -> None:
    job = {"metadata": {"name": "bench"}, "spec": {"numNodes": 1, "image": "i"}}
    assert sized(job, 4) == {"apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob",
                             "metadata": {"name": "bench-n4"}, "spec": {"numNodes": 4, "image": "i"}}
    assert job["spec"]["numNodes"] == 1


@pytest.mark.parametrize("bad", ["", "0,1", "a"])
def test_sizes_must_be_node_counts(bad: str) -> None:
    from multinode.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["scaling-test", "-f", "x.yaml", "--nodes", bad])
