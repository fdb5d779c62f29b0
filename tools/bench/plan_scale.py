"""Benchmark: what one reconcile pass of a huge job costs in the operator's own code, no cluster needed.

    .venv/bin/python -P tools/bench/plan_scale.py [--nodes 1000 5000 20000] [--profile 20000]

For each size it times the planner through a job's life (the first pass that renders every pod, all
Pending, all Running, one failed pod, a running gang with heartbeats from every rank so the straggler
and hang policies run), the status the operator writes (dump and its JSON size) and the creation stream
(rendering every pod once). The per-node cost at the largest size against the smallest says whether any
step is worse than O(N): a quadratic step shows as a per-node cost growing with N. `--profile N` prints
cProfile's top functions of the passes at N. Writes .cache/bench/plan_scale.json. `make bench` runs it; a
small smoke of it runs first in `make bench` (tests/bench).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from multinode.testing import stored_job

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.controller.status_patch import dump_status
from multinode.reconcile import Observed, ObservedPod, plan
from multinode.reconcile.progress import JobProgress, RankProgress
from multinode.render import RenderSettings

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / ".cache" / "bench" / "plan_scale.json"
NOW = datetime(2026, 11, 20, 12, 0, 0, tzinfo=timezone.utc)
SETTINGS = RenderSettings()


def pods(n: int, phase: str) -> list[ObservedPod]:
    return [ObservedPod(name=f"llama-{i}-a0", job_name="llama", index=i, attempt=0, phase=phase,
                        node=f"node-{i}", ready=phase == "Running", started_at="2026-11-20T11:00:00Z")
            for i in range(n)]


def progress(n: int) -> JobProgress:
    # Every rank steps in about 1 s; a few are slow (stragglers), none is silent.
    ranks = tuple(RankProgress(index=i, node=f"node-{i}", step=100, last_progress=NOW - timedelta(seconds=1),
                               step_seconds=3.0 if i % 997 == 5 else 1.0 + (i % 7) / 100) for i in range(n))
    return JobProgress(attempt=0, ranks=ranks, first_progress=NOW - timedelta(minutes=30), checked=NOW,
                       heartbeats=True)


def passes(n: int) -> dict[str, float]:
    """Seconds per step of one job's life at `n` nodes."""
    job = stored_job(n, hangDetection={"timeoutSeconds": 600, "stragglers": {"forSeconds": 60}})
    took: dict[str, float] = {}

    def timed(name: str, fn):
        start = time.perf_counter()
        value = fn()
        took[name] = time.perf_counter() - start
        return value

    first = timed("plan_first", lambda: plan(job, Observed(service_exists=True), previous=None, now=NOW,
                                              settings=SETTINGS))
    timed("render_all", lambda: sum(1 for _ in first.pods_to_create))
    pending = timed("plan_pending", lambda: plan(job, Observed(pods=tuple(pods(n, "Pending")), service_exists=True),
                                                  previous=first.status, now=NOW, settings=SETTINGS))
    running_pods = tuple(pods(n, "Running"))
    running = timed("plan_running", lambda: plan(job, Observed(pods=running_pods, service_exists=True),
                                                  previous=pending.status, now=NOW, settings=SETTINGS))
    with_progress = Observed(pods=running_pods, service_exists=True, progress=progress(n))
    later = NOW + timedelta(seconds=90)
    steady = timed("plan_running_progress", lambda: plan(job, with_progress, previous=running.status, now=NOW,
                                                          settings=SETTINGS))
    timed("plan_stragglers_confirmed", lambda: plan(job, with_progress, previous=steady.status, now=later,
                                                     settings=SETTINGS))
    failed = list(running_pods)
    failed[n // 2] = replace(failed[n // 2], phase="Failed", exit_code=1, reason="Error", ready=False)
    restart = timed("plan_one_failed", lambda: plan(job, Observed(pods=tuple(failed), service_exists=True),
                                                     previous=running.status, now=NOW, settings=SETTINGS))
    gone = [p for p in running_pods if p.index != n // 3]
    timed("plan_one_lost", lambda: plan(job, Observed(pods=tuple(gone), service_exists=True),
                                        previous=running.status, now=NOW, settings=SETTINGS))
    timed("plan_restarting", lambda: plan(job, Observed(pods=tuple(failed), service_exists=True),
                                          previous=restart.status, now=NOW, settings=SETTINGS))
    dumped = timed("dump_status", lambda: dump_status(running.status))
    took["status_bytes"] = len(json.dumps(dumped))
    took["status_bytes_restart"] = len(json.dumps(dump_status(restart.status)))
    timed("validate_job", lambda: TrainingJob.model_validate({**job.model_dump(by_alias=True, exclude_none=True),
                                                              "status": dumped}))
    timed("validate_status", lambda: TrainingJobStatus.model_validate(dumped))
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 20000])
    parser.add_argument("--profile", type=int, default=None, help="print cProfile's top functions at this size")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = {n: passes(n) for n in args.nodes}
    steps = [k for k in rows[args.nodes[0]] if not k.startswith("status_bytes")]
    print(f"{'step':<28}" + "".join(f"{n:>12}" for n in args.nodes) + f"{'µs/node growth':>18}")
    growth = {}
    small, big = min(args.nodes), max(args.nodes)
    for step in steps:
        per_small, per_big = rows[small][step] / small, rows[big][step] / big
        growth[step] = per_big / per_small if per_small > 0 else float("nan")
        print(f"{step:<28}" + "".join(f"{rows[n][step] * 1000:>10.1f}ms" for n in args.nodes)
              + f"{growth[step]:>17.2f}×")
    for key in ("status_bytes", "status_bytes_restart"):
        print(f"{key:<28}" + "".join(f"{rows[n][key]:>12.0f}" for n in args.nodes))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"sizes": args.nodes, "seconds": {str(n): rows[n] for n in args.nodes},
                                    "per_node_growth": growth}, indent=2))
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        passes(args.profile)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(35)
    return 0


if __name__ == "__main__":
    sys.exit(main())
