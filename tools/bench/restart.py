"""Benchmark: an operator (re)start with a large job in flight: time to its first reconcile, and its CPU.

    .venv/bin/python -P tools/bench/restart.py [--nodes 1000] [--restarts 3]

Starts a local cluster of its own with `--nodes` fake 8-GPU nodes (kwok), runs one job of `--nodes` pods to
all Running, then stops the operator and starts a fresh one, `--restarts` times. For each restart, from the
moment the new process is spawned:
  first_reconcile_s   until multinode_reconcile_duration_seconds counts one (polled every 50 ms)
  cpu_at_first_s      the process's CPU seconds (user + system, /proc/<pid>/stat) at that moment
  settled_s, cpu_settled_s   until its CPU stops growing (under 0.05 s in a 2 s window), and the CPU then
The process's start (imports, about 1 s of CPU here) is in both. An operator restart lists every object it
watches (the job's pods and the cluster's nodes): what it does with that initial list is what this measures.
`--profile-operator PSTATS` runs the first restart under cProfile (its figures are then cProfile's).
Writes .cache/bench/restart.json; tests/bench runs a small smoke of it.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import cpu_seconds, machine
from startup import Harness
from localcluster.harness.operator import OperatorProcess
from localcluster.harness.waiting import wait_for

OUT = REPO / ".cache" / "bench" / "restart.json"
CPU_SETTLED_WINDOW_S = 2.0
CPU_SETTLED_BELOW_S = 0.05


def reconciles(op: OperatorProcess) -> float:
    """How many reconciles the operator has finished; 0 while its metrics server is not up yet."""
    try:
        samples = op.metrics().get("multinode_reconcile_duration_seconds") or []
    except OSError:
        return 0
    return sum(s.value for s in samples if s.name.endswith("_count"))


def one_restart(h: Harness, label: str, timeout: float, profile_to: Path | None = None) -> dict:
    assert h.operator is not None
    h.operator.stop()
    op = h.operator = OperatorProcess(h.operator.kubeconfig, h.operator.namespaces,
                                      h.cluster.dir / "logs" / f"operator-{label}.log", profile_to=profile_to)
    t0 = time.monotonic()
    op.start(wait_ready=False)
    assert op.proc is not None
    pid = op.proc.pid
    wait_for(lambda: reconciles(op) > 0, timeout=timeout, what="the restarted operator's first reconcile",
             interval=0.05)
    first, cpu_first = time.monotonic() - t0, cpu_seconds(pid)
    samples: list[float] = []  # CPU seconds, one per window

    def settled() -> bool:
        samples.append(cpu_seconds(pid))
        return len(samples) > 1 and samples[-1] - samples[-2] < CPU_SETTLED_BELOW_S

    wait_for(settled, timeout=timeout, what="the restarted operator's CPU to settle", interval=CPU_SETTLED_WINDOW_S)
    result = {"first_reconcile_s": first, "cpu_at_first_s": cpu_first,
              "settled_s": time.monotonic() - t0 - CPU_SETTLED_WINDOW_S, "cpu_settled_s": samples[-1]}
    if profile_to is not None:
        op.stop()  # cProfile writes its file at exit; the next restart (or the end) starts without it
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--profile-operator", type=Path, default=None, metavar="PSTATS",
                        help="run the first restarted operator under cProfile (its event-loop thread), stats here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through `finally`: cluster stopped
    h = Harness(args.nodes, systems=("ours",), audit_log=False)
    try:
        h.start()
        t0 = time.monotonic()
        h.create("ours", "inflight", args.nodes, 8)
        h.clock.wait(lambda: h.milestones("ours", "inflight", args.nodes, t0), args.timeout, "the job to run")
        print(f"{args.nodes}-node job Running after {time.monotonic() - t0:.1f}s", flush=True)
        runs = []
        for i in range(args.restarts):
            runs.append(one_restart(h, f"restart-{i}", args.timeout, args.profile_operator if i == 0 else None))
            print("  restart {}: first reconcile {first_reconcile_s:.2f}s (CPU {cpu_at_first_s:.2f}s), CPU settled "
                  "after {settled_s:.1f}s at {cpu_settled_s:.2f}s".format(i, **runs[-1]), flush=True)
    finally:
        h.stop()
    medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine(), "nodes": args.nodes, "runs": runs, "medians": medians},
                                   indent=2))
    print(f"medians: {medians}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
