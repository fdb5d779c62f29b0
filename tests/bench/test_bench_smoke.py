"""A smoke run of every benchmark `make bench` runs, at toy sizes, so the harness cannot rot unnoticed (and of
tools/bench/progress_memory.py, which `make bench` leaves out: its figures compare two versions of the code).

Each script starts a local cluster of its own (a few fake nodes) beside the session's, runs the systems it
compares (multinode, JobSet, Kubeflow Training Operator v1; `make test` builds both peers) and writes its
JSON, which is checked here: every milestone was reached in order, the audit log attributed each system's
requests to it, and the operator's writes are the ones a clean run needs. Figures are not judged (that
is docs/benchmarks.md's job, on a quiet machine).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

BENCH = REPO / "tools" / "bench"


def run_bench(script: str, *args: str, timeout: float = 480) -> None:
    # -P: tools/bench must not shadow packages; the scripts put what they need on sys.path themselves.
    proc = subprocess.run([sys.executable, "-P", str(BENCH / script), *args], cwd=REPO, env=dict(os.environ),
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every smoke run writes its JSON. Each bench runs once, in its own fixture, on first use: its
    test and the report test both ask for it, so neither depends on the other having run (any order)."""
    return tmp_path_factory.mktemp("bench")


@pytest.fixture(scope="module")
def startup_report(bench_dir: Path) -> dict:
    out = bench_dir / "startup.json"
    run_bench("startup.py", "--sizes", "4", "--runs", "1", "--systems", "ours", "jobset", "kubeflow",
              "--out", str(out))
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def floor_report(bench_dir: Path) -> dict:
    out = bench_dir / "floor.json"
    run_bench("floor.py", "--nodes", "4", "--runs", "1", "--out", str(out))
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def load_report(bench_dir: Path) -> dict:
    out = bench_dir / "load.json"
    run_bench("load.py", "--jobs", "3", "--nodes-per-job", "2", "--runs", "1", "--rss-job-nodes", "2",
              "--cluster-nodes", "8", "--systems", "ours", "jobset", "--out", str(out))
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def recovery_reports(bench_dir: Path) -> tuple[dict, dict]:
    peers_out, ours_out = bench_dir / "recovery_peers.json", bench_dir / "recovery.json"
    run_bench("recovery_peers.py", "--nodes", "2", "--trials", "1", "--out", str(peers_out))
    run_bench("recovery.py", "--nodes", "2", "--trials", "2", "--out", str(ours_out))
    return json.loads(peers_out.read_text()), json.loads(ours_out.read_text())


@pytest.fixture(scope="module")
def node_loss_report(bench_dir: Path) -> dict:
    # Short timings (grace 20 s, tolerations 5 s) and 1 trial per side: this proves the bench works (a
    # second kwok dies, the nodes go Unknown without a heartbeat, both sides make a new gang), not the
    # figure, which is stock timings' (docs/benchmarks.md).
    out = bench_dir / "node_loss.json"
    run_bench("node_loss.py", "--trials", "1", "--timings", "short", "--timeout-jobset", "120", "--out", str(out),
              timeout=300)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def gang_report(bench_dir: Path) -> dict:
    out = bench_dir / "gang.json"
    run_bench("gang.py", "--nodes", "8", "--runs", "1", "--out", str(out))
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def mirror_report(bench_dir: Path) -> dict:
    run_bench("mirror.py", "--scales", "0", "--small-files", "50", "--rounds", "1", "--dir", str(bench_dir))
    assert not (bench_dir / "cache").exists()   # the source trees are removed after the run
    return json.loads((bench_dir / "mirror.json").read_text())


@pytest.fixture(scope="module")
def mirror_chaos_report(bench_dir: Path) -> dict:
    run_bench("mirror_chaos.py", "--runs", "2", "--ops", "20", "--dir", str(bench_dir))
    return json.loads((bench_dir / "mirror_chaos.json").read_text())


@pytest.fixture(scope="module")
def failover_report(bench_dir: Path) -> dict:
    # Short timings (a 4 s Lease) and 2 + 1 trials: this proves the bench works (a killed leader is replaced,
    # a stopped one hands over), not the figure, which is client-go's stock timings' (docs/benchmarks.md).
    out = bench_dir / "failover.json"
    run_bench("failover.py", "--trials", "2", "--term-trials", "1", "--nodes", "2", "--lease-duration", "4",
              "--renew-deadline", "3", "--retry-period", "0.5", "--out", str(out), timeout=300)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def huge_report(bench_dir: Path) -> dict:
    out = bench_dir / "huge.json"
    run_bench("huge.py", "--nodes", "30", "--kwok-nodes", "30", "--rss-jobs", "3", "--rss-job-nodes", "2",
              "--timeout", "180", "--out", str(out))
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def restart_report(bench_dir: Path) -> dict:
    out = bench_dir / "restart.json"
    run_bench("restart.py", "--nodes", "4", "--restarts", "1", "--timeout", "120", "--out", str(out))
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def plan_scale_report(bench_dir: Path) -> dict:
    out = bench_dir / "plan_scale.json"
    run_bench("plan_scale.py", "--nodes", "50", "200", "--out", str(out))
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def progress_memory_report(bench_dir: Path) -> dict:
    out = bench_dir / "progress_memory.json"
    run_bench("progress_memory.py", "--ranks", "6", "--rate", "100000", "--line-bytes", "1024", "--sweeps", "2",
              "--tracemalloc", "--out", str(out))
    return json.loads(out.read_text())


def test_progress_memory_bench_sweeps_every_rank_and_reads_the_memory(progress_memory_report: dict) -> None:
    report = progress_memory_report
    assert report["sweeps"] == 2 and report["reads"] == 12 and report["ranks_with_a_step"] == 6, report
    assert report["mib_served"] >= 0 and 0 < report["rss_before_mib"] <= report["peak_rss_mib"], report
    assert report["tracemalloc_peak_mib"] > 0 and report["steps_seen"], report


def test_huge_bench_starts_one_big_job_and_many_small_ones_and_reads_the_rss(huge_report: dict) -> None:
    h, m = huge_report["huge"], huge_report["many"]
    at = h["milestones_s"]
    assert h["nodes"] == 30 and 0 < at["created"] <= at["scheduled"] <= at["running"], at
    assert at["status"] > 0 and 0 < h["idle_rss_mb"] <= h["peak_rss_mb"], h
    assert 0 < h["status_bytes"] < 20_000, h
    assert m["jobs"] == 3 and m["all_running_s"] > 0 and 0 < m["idle_rss_mb"] <= m["peak_rss_mb"], m


def test_restart_bench_sees_the_restarted_operator_reconcile(restart_report: dict) -> None:
    (run,) = restart_report["runs"]
    assert restart_report["nodes"] == 4 and 0 < run["first_reconcile_s"] <= run["settled_s"] + 2, run
    assert 0 < run["cpu_at_first_s"] <= run["cpu_settled_s"], run


def test_plan_scale_bench_times_every_step(plan_scale_report: dict) -> None:
    report = plan_scale_report
    assert report["sizes"] == [50, 200]
    assert all(t > 0 for t in report["seconds"]["200"].values()), report["seconds"]
    assert report["seconds"]["200"]["status_bytes"] < 20_000


def test_startup_bench_runs_all_three_systems(startup_report: dict) -> None:
    report = startup_report
    assert report["systems"] == ["ours", "jobset", "kubeflow"]
    [size] = report["results"]
    assert size["nodes"] == 4
    for system in ("ours", "jobset", "kubeflow"):
        med = size["median_s"][system]
        assert 0 < med["created"] <= med["scheduled"] <= med["running"], (system, med)
        assert med["status"] > 0, (system, med)
        assert size["api"][system]["all_runs"]["writes"] > 0, f"no requests of {system} in the audit log"
    ours = size["api"]["ours"]["all_runs"]["by_resource"]
    # Exactly one create per pod (no 409 retries: expectations), one Service, and no reads at all.
    assert ours["write pods"] == 4, ours
    assert ours["write services"] == 1, ours
    assert size["api"]["ours"]["all_runs"]["reads"] == 0, ours
    assert set(size["ratio_ours_to"]) == {"jobset", "kubeflow"}
    assert report["operator_peak_rss_mb"] > 0
    # CPU per start, read from /proc: each controller process used some (the Job controller's share is a
    # difference of two kube-controller-manager readings, which a 4-pod run leaves to noise).
    cpu = size["cpu_per_1000_pods"]
    assert cpu["ours"] > 0 and cpu["jobset_controller"] > 0, cpu
    assert set(report["cpu"]) == {"ours", "jobset"}


def test_floor_bench_times_both_pod_shapes(floor_report: dict) -> None:
    report = floor_report
    assert set(report["median_s"]) == {"multinode", "jobset"} and all(v > 0 for v in report["median_s"].values())
    # The attempt's shared env lives in a ConfigMap (envFrom), so a pod body is no larger than the Job
    # controller's, preflight and all (issue 18's target).
    assert report["create_body_bytes"]["multinode"] <= report["create_body_bytes"]["jobset"]
    # The client's CPU for a pod create, through the operator's own write path.
    assert all(v > 0 for v in report["median_client_cpu_ms_per_pod"].values()), report["client_cpu_ms_per_pod"]


def test_status_write_diagnostic_compares_the_crd_variants(bench_dir: Path) -> None:
    out = bench_dir / "status_write.json"
    run_bench("status_write.py", "--writes", "5", "--rounds", "1", "--nodes", "2", "--out", str(out))
    report = json.loads(out.read_text())
    assert set(report["median_ms"]) == {"committed", "keyed", "no-cel"}, report
    assert all(v > 0 for v in report["median_ms"].values()), report


def test_load_bench_measures_throughput_and_memory(load_report: dict) -> None:
    report = load_report
    assert all(v > 0 for v in report["throughput"]["median_s"].values()), report["throughput"]
    assert set(report["throughput"]["ratio_ours_to"]) == {"jobset"}
    memory = report["memory"]
    assert 0 < memory["idle_rss_mb"] <= memory["peak_rss_mb"], memory
    # Requests per job from the audit log (--nodes-per-job 2): ours one create per pod and one Service.
    per_job = report["throughput"]["requests_per_job"]
    assert per_job["ours"]["by_resource"]["write pods"] == 2, per_job["ours"]
    assert per_job["ours"]["by_resource"]["write services"] == 1, per_job["ours"]
    assert per_job["jobset"]["by_resource"]["write jobs"] == 1, per_job["jobset"]
    cpu = report["throughput"]["cpu_s"]
    assert all(run["operator"] > 0 and run["kube-apiserver"] > 0 for run in cpu["ours"]), cpu
    # Each system alone during its bursts: JobSet's controller is not running (nor billed) during ours.
    assert all("jobset" not in run for run in cpu["ours"]) and all(run["jobset"] > 0 for run in cpu["jobset"]), cpu


def test_recovery_benches_see_a_replacement_gang(recovery_reports: tuple[dict, dict]) -> None:
    peers, ours_report = recovery_reports
    results = peers["results"]
    assert {r["system"] for r in results} == {"ours", "jobset"}
    for r in results:
        assert r["trials"] == 1 and r["failure_to_gang_s"]["median"] > 0, r
    [ours] = ours_report["results"]
    assert ours["nodes"] == 2 and ours["trials"] == 2, ours
    assert 0 < ours["failure_to_gang_s"]["median"] <= ours["failure_to_gang_s"]["p99"], ours


def test_gang_bench_times_the_native_gang_beside_the_non_gang_path(gang_report: dict) -> None:
    report = gang_report
    results = {r["mode"]: r for r in report["results"]}
    assert set(results) == {"gang", "nogang"} and report["nodes"] == 8
    # Each side ran the path it claims: the operator's status says which, and only the gang has a PodGroup
    # that the scheduler placed in one pod-group attempt.
    assert [r["gang_mode"] for r in results["gang"]["runs"]] == ["PodGroup"]
    assert [r["gang_mode"] for r in results["nogang"]["runs"]] == ["None"]
    for mode, res in results.items():
        med = res["median_s"]
        assert 0 < med["created"] <= med["scheduled"] <= med["running"] <= med["status"], (mode, med)
        assert 0 < med["first_bound"] <= med["scheduled"], (mode, med)
        [run] = res["runs"]
        assert run["scheduler"]["scheduler_schedule_attempts_total{result=scheduled}"] >= 8, (mode, run["scheduler"])
    gang_sched = results["gang"]["runs"][0]["scheduler"]
    assert gang_sched.get("scheduler_podgroup_schedule_attempts_total{result=scheduled}", 0) >= 1, gang_sched
    # All or none: no member of the gang is bound before the PodGroup is scheduled, i.e. before all exist.
    assert results["gang"]["median_s"]["first_bound"] >= results["gang"]["median_s"]["created"]
    assert set(report["ratio_gang_to_nogang"]) >= {"created", "scheduled", "running"}


def test_node_loss_bench_kills_kubelets_and_measures_both_sides(node_loss_report: dict) -> None:
    report = node_loss_report
    assert report["heartbeats_after_kill"] == {"node_status": 0, "lease": 0}, report["heartbeats_after_kill"]
    assert report["node_unknown_s"]["n"] == report["doomed_nodes"] == 2, report["node_unknown_s"]
    # The nodes go Unknown no earlier than the grace period after the kill (20 s on short timings).
    assert report["node_unknown_s"]["median"] >= 15, report["node_unknown_s"]
    assert report["results"]["ours"]["n"] == 1 and report["results"]["ours"]["median"] > 0, report["results"]
    # JobSet's side ran to a verdict: a gang, or none within the timeout (what every run so far saw: its
    # pod stays Terminating on the dead node, docs/benchmarks.md).
    assert report["results"]["jobset"] or report["timed_out"]["jobset"] == 1, report
    if report["timed_out"]["jobset"]:
        # ... and then the bench says what it waits on: the evicted pod, Terminating on the dead node.
        blocked = report["jobset_blocked"]["nl0"]
        assert blocked["stuck_pods"] >= 1 and "Terminating" in report["jobset_blocked_example"], blocked
        assert any(p["node"] == "nl-jobset-0-doomed" and p["deletion_timestamp"] for p in blocked["pods"]), blocked


def test_mirror_bench_compares_with_cp_and_rsync(mirror_report: dict) -> None:
    report = mirror_report
    [tree] = report["trees"]
    assert tree["files"] > 50 and tree["checkpoints"] == 4, tree
    assert set(tree["ratio_mirror_to"]) == {"cp", "rsync"} and all(v > 0 for v in tree["ratio_mirror_to"].values())
    # Re-mirroring unchanged checkpoints under new names copies (almost) nothing: they are linked.
    assert [r["how"] for r in report["remirror"]] == ["renamed", "copied"]
    assert all(r["copied_pct"] < 1 for r in report["remirror"]), report["remirror"]


def test_mirror_chaos_bench_counts_runs_and_violations(mirror_chaos_report: dict) -> None:
    report = mirror_chaos_report
    assert report["runs"] == 2 and report["passes"] >= 2 and report["violations"] == 0, report


def test_failover_bench_sees_the_standby_lead_and_act(failover_report: dict) -> None:
    report = failover_report
    kill, term = report["results"]["kill"], report["results"]["term"]
    assert kill["trials"] == 2 and term["trials"] == 1, report["results"]
    for r in (kill, term):
        assert 0 < r["leading_s"]["median"] <= r["acting_s"]["median"], r
    # Killed: the Lease had to expire (no earlier than its duration less the last renewal's age, one retry).
    assert min(kill["leading_s"]["all"]) >= 4 - 0.5 * 1.2, kill
    # Stopped: released, so the standby took over within a few retry periods of the old leader's exit, long
    # before the 4 s Lease could have expired.
    # (None: the standby led before the old leader's exit was even seen.)
    assert all(s is None or s < 2.5 for s in term["exit_to_leading_s"]), term
    assert term["leading_s"]["worst"] < 4, term


@pytest.mark.usefixtures("startup_report", "floor_report", "load_report", "recovery_reports", "node_loss_report",
                         "gang_report", "mirror_report", "mirror_chaos_report", "failover_report", "huge_report",
                         "plan_scale_report", "restart_report")
def test_report_fills_every_table_of_the_docs(bench_dir: Path, tmp_path: Path) -> None:
    """tools/bench/report.py on the smoke runs' JSON: every generated section of a copy of the docs."""
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(REPO / "docs" / "benchmarks.md", docs / "benchmarks.md")
    run_bench("report.py", "--from", str(bench_dir), "--docs", str(docs))
    combined = json.loads((docs / "benchmarks.json").read_text())
    assert set(combined) == {"startup", "floor", "load", "recovery_peers", "recovery", "node_loss", "gang", "mirror",
                            "mirror_chaos", "failover", "huge", "plan_scale", "restart"}
    text = (docs / "benchmarks.md").read_text()
    assert text != (REPO / "docs" / "benchmarks.md").read_text()
    assert "| 4 | all pods created |" in text and "Kubeflow v1" in text
    assert "3 jobs × 2 pods, all Running" in text
    assert "| one 30-node job |" in text and "| step | 50 nodes (ms) | 200 nodes (ms) |" in text
    assert "a 4-node job Running and 4 kwok nodes" in text
    assert "| all pods bound |" in text and "of one 8-node job" in text
