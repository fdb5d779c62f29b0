"""Benchmark: a pod fails → the replacement gang exists, ours against JobSet's restart.

    .venv/bin/python -P tools/bench/recovery_peers.py [--nodes 8 64] [--trials 10]

Same harness as tools/bench/startup.py (a cluster of its own, both systems side by side). For each size
and system one job runs; each trial fails pod index 1 of the current attempt (exit code 1, kwok stage)
and measures, from raw pod watches:
  failure → gang   the watch event showing the pod Failed → the last pod of the next attempt created;
  gone → gang      the last pod of the old attempt deleted → the same point.
Ours: backoff 0, so the default BlockingRecreate waits only for the old pods to go. JobSet:
failurePolicy.maxRestarts 1000; the Job fails (backoffLimit 0), JobSet deletes its Jobs and recreates
them, kube-controller-manager's Job controller creates the pods (restart-attempt label). Systems
alternate per size. Prints median and p99, writes .cache/bench/recovery_peers.json. `make bench` runs it;
tests/bench runs a small smoke of it.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import machine
from startup import Harness

OUT = REPO / ".cache" / "bench" / "recovery_peers.json"
FAIL = {"localcluster.multinode.dev/finish-after": "0s", "localcluster.multinode.dev/exit-code": "1"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def trials(h: Harness, system: str, n: int, count: int, timeout: float) -> dict:
    name = f"rec{n}"
    h.create(system, name, n, 8)
    clock = h.clock
    fail_to_gang, gone_to_gang = [], []

    def gang(attempt):
        pods = clock.of((system, name, attempt))
        return pods if len(pods) >= n and all("running" in p for p in pods) else None

    for attempt in range(count + 1):
        pods = clock.wait(lambda: gang(attempt), timeout, f"{system} attempt {attempt} running")  # noqa: B023 - waited on here
        if attempt > 0:
            old = clock.of((system, name, attempt - 1))
            done = max(p["created"] for p in pods)
            failed = [p["failed"] for p in old if "failed" in p]
            if failed:
                fail_to_gang.append(done - min(failed))
            gone = [p["deleted"] for p in old if "deleted" in p]
            if len(gone) >= n - 1:  # ours keeps the failed pod for its logs
                gone_to_gang.append(done - max(gone))
        if attempt == count:
            break
        victim = sorted(pods, key=lambda p: p["name"])[1]["name"]
        h.core.patch_namespaced_pod(victim, h.ns[system], {"metadata": {"annotations": FAIL}})
    h.delete(system, name)
    h.wait_pods_gone(system, timeout)

    def stats(values):
        return {"median": statistics.median(values), "p99": percentile(values, 0.99), "all": values} if values else None

    return {"trials": len(fail_to_gang), "failure_to_gang_s": stats(fail_to_gang),
            "old_gone_to_gang_s": stats(gone_to_gang)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    h = Harness(max(args.nodes), by_attempt=True)
    results = []
    try:
        h.start()
        for i, n in enumerate(args.nodes):
            for system in (("ours", "jobset") if i % 2 == 0 else ("jobset", "ours")):
                r = trials(h, system, n, args.trials, args.timeout)
                results.append({"nodes": n, "system": system, **r})
                print(f"  {n:>4} nodes {system:>6}: {r}", flush=True)
    finally:
        h.stop()
    nan = {"median": float("nan"), "p99": float("nan")}
    print()
    print(f"{'nodes':>6} {'system':>7} {'trials':>6} {'fail→gang median':>17} {'p99':>7} "
          f"{'gone→gang median':>17} {'p99':>7}")
    for r in results:
        f, g = r["failure_to_gang_s"] or nan, r["old_gone_to_gang_s"] or nan
        print(f"{r['nodes']:>6} {r['system']:>7} {r['trials']:>6} {f['median']:>16.3f}s {f['p99']:>6.3f}s "
              f"{g['median']:>16.3f}s {g['p99']:>6.3f}s")
    from localcluster.binaries import read_versions

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine(), "versions": read_versions(), "results": results}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
