"""Benchmark: many jobs at once. Throughput, ours against the peers, and the operator's peak memory.

    .venv/bin/python -P tools/bench/load.py [--jobs 100] [--nodes-per-job 8] [--runs 2] [--rss-job-nodes 16]
                                            [--systems ours jobset kubeflow]

Same harness as tools/bench/startup.py (a cluster of its own, the systems side by side, 128 fake 8-GPU
nodes). Throughput: `--jobs` jobs of `--nodes-per-job` pods (1 GPU each) are created at once from 8
threads; measured from the first create to every job reporting Running (TrainingJob phase; JobSet all
replicated Jobs ready; PyTorchJob condition Running), rotating the systems, `--runs` each, each system's
controller the only one running during its bursts (Harness.run_alone). Per burst,
from the apiserver's audit log (first create → all Running + 2 s), each system's requests per job by verb
class and resource (JobSet's include kube-controller-manager's Job controller, which creates its pods; the
TrainingJob or JobSet itself is the benchmark's create, counted for neither), the processes' CPU
seconds over the burst (Harness.cpu), and the pod watchers kube-apiserver closed during it because they fell
behind (every controller of the cluster pays for those: it lists and watches again). Memory: a fresh
operator process, then `--jobs` jobs × `--rss-job-nodes` pods (no GPUs) until all Running and 5 s more;
the operator's peak RSS (VmHWM) and its RSS then. Writes .cache/bench/load.json. `make bench` runs it;
tests/bench runs a small smoke of it.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import audit_counts, machine, rss_now_mb, rss_peak_mb, terminated_watchers
from startup import LABELS, SYSTEMS, Harness
from localcluster.harness.operator import OperatorProcess

OUT = REPO / ".cache" / "bench" / "load.json"
TRAILING_SECONDS = 2.0  # after all Running: the trailing status writes and Events belong to the burst


def burst(h: Harness, system: str, prefix: str, jobs: int, nodes: int, gpus: int, timeout: float) -> dict:
    """Create the jobs at once and wait until all say they run: the seconds that took, the processes' CPU
    seconds over it, the pod watchers kube-apiserver closed meanwhile for falling behind, and the wall-clock
    window (to TRAILING_SECONDS later) for the audit log."""
    names = [f"{prefix}-{i}" for i in range(jobs)]
    dropped0 = terminated_watchers(h.api)
    cpu0 = h.cpu()
    wall0, t0 = time.time(), time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: h.create(system, n, nodes, gpus), names))
    h.clock.wait(lambda: all((system, n) in h.clock.status and "running" in h.clock.status[(system, n)]
                             for n in names), timeout, f"{jobs} {system} jobs Running")
    elapsed = max(h.clock.status[(system, n)]["running"] for n in names) - t0
    cpu1 = h.cpu()
    time.sleep(TRAILING_SECONDS)
    return {"seconds": elapsed, "cpu_s": {p: cpu1[p] - cpu0[p] for p in cpu0},
            "terminated_pod_watchers": terminated_watchers(h.api) - dropped0, "window": (wall0 - 0.05, time.time())}


def requests_per_job(h: Harness, system: str, windows: list[tuple[float, float]], jobs: int) -> dict:
    """The system's requests over its bursts, per job: by "<write|read|watch> <resource>", and the totals."""
    total = sum(audit_counts(h.cluster.audit_log_path, h.users(system), windows), Counter())
    per_job = {f"{cls} {resource}": n / (jobs * len(windows)) for (cls, resource), n in sorted(total.items())}
    return {"by_resource": per_job,
            "writes": sum(v for k, v in per_job.items() if k.startswith("write ")),
            "reads": sum(v for k, v in per_job.items() if k.startswith("read "))}


def cleanup(h: Harness, system: str, prefix: str, jobs: int, timeout: float) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: h.delete(system, f"{prefix}-{i}"), range(jobs)))
    h.wait_pods_gone(system, timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--nodes-per-job", type=int, default=8)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rss-job-nodes", type=int, default=16)
    parser.add_argument("--cluster-nodes", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        help="ours is always measured; the others are the peers")
    parser.add_argument("--profile-operator", type=Path, default=None, metavar="PSTATS",
                        help="run the throughput bursts' operator under cProfile, its stats written here")
    args = parser.parse_args()
    systems = ("ours", *[s for s in args.systems if s != "ours"])
    # SIGTERM (timeout, kill) unwinds through `finally`, which stops the operator and the cluster.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    h = Harness(args.cluster_nodes, systems=systems, profile_to=args.profile_operator)
    throughput: dict[str, list[float]] = {s: [] for s in systems}
    cpu: dict[str, list[dict]] = {s: [] for s in systems}
    dropped: dict[str, list[float]] = {s: [] for s in systems}
    windows: dict[str, list[tuple[float, float]]] = {s: [] for s in systems}
    try:
        h.start()
        for i in range(args.runs):
            for system in systems[i % len(systems):] + systems[:i % len(systems)]:
                h.run_alone(system)
                b = burst(h, system, f"t{i}", args.jobs, args.nodes_per_job, 1, args.timeout)
                throughput[system].append(b["seconds"])
                cpu[system].append(b["cpu_s"])
                dropped[system].append(b["terminated_pod_watchers"])
                windows[system].append(b["window"])
                print(f"  throughput run {i} {system:>6}: {args.jobs}×{args.nodes_per_job} all Running in "
                      f"{b['seconds']:.2f}s; pod watchers dropped {b['terminated_pod_watchers']:.0f}; CPU s "
                      + ", ".join(f"{p} {v:.2f}" for p, v in b["cpu_s"].items()),
                      flush=True)
                cleanup(h, system, f"t{i}", args.jobs, args.timeout)
        time.sleep(2.0)  # the audit log is written in batches (1 s)
        api = {s: requests_per_job(h, s, windows[s], args.jobs) for s in systems}
        # Memory: a fresh operator, so its high-water mark is this load's.
        h.operator.stop()
        h.operator = OperatorProcess(h.operator.kubeconfig, [h.ns["ours"]], h.cluster.dir / "logs" / "operator-rss.log")
        h.run_alone("ours")  # starts the fresh operator; the peers' controllers stay stopped
        pid = h.operator.proc.pid
        idle = rss_now_mb(pid)
        burst(h, "ours", "m", args.jobs, args.rss_job_nodes, 0, args.timeout)
        time.sleep(5 - TRAILING_SECONDS)
        memory = {"jobs": args.jobs, "pods_per_job": args.rss_job_nodes, "idle_rss_mb": idle,
                  "peak_rss_mb": rss_peak_mb(pid), "rss_after_mb": rss_now_mb(pid)}
    finally:
        h.stop()
    med = {s: statistics.median(v) for s, v in throughput.items()}
    print()
    print(f"throughput: {args.jobs} jobs × {args.nodes_per_job} pods, all Running (median of {args.runs}): "
          + ", ".join(f"{LABELS[s]} {med[s]:.2f}s" for s in systems)
          + "; ratio ours/" + ", ours/".join(f"{LABELS[p]} {med['ours'] / med[p]:.2f}" for p in systems[1:]))
    for s in systems:
        print(f"requests per job, {LABELS[s]}: {api[s]['writes']:.2f} writes, {api[s]['reads']:.2f} reads: "
              + ", ".join(f"{k} {v:.2f}" for k, v in api[s]["by_resource"].items()))
    print(f"operator memory, {args.jobs} jobs × {args.rss_job_nodes} pods: idle {memory['idle_rss_mb']:.0f} MB, "
          f"peak {memory['peak_rss_mb']:.0f} MB, after {memory['rss_after_mb']:.0f} MB")
    from localcluster.binaries import read_versions

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine(), "versions": read_versions(),
                               "throughput": {"jobs": args.jobs, "pods_per_job": args.nodes_per_job,
                                              "runs_s": throughput, "median_s": med,
                                              "ratio_ours_to": {p: med["ours"] / med[p] for p in systems[1:]},
                                              "cpu_s": cpu, "terminated_pod_watchers": dropped,
                                              "requests_per_job": api},
                               "memory": memory}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
