"""Benchmark: start of one N-node job as a native gang (PodGroup, minCount N) against the non-gang path.

    .venv/bin/python -P tools/bench/gang.py [--nodes 1000] [--runs 3] [--modes gang nogang]

Issue 17's closing figure. Each mode gets a local cluster of its own with N fake 8-GPU nodes (kwok; pods
start at once), one after the other in this process, and the multinode operator; one job at a time asking
for all N nodes (8 GPUs per pod: one pod per node), `--runs` times:
  gang    the cluster as the tests and the demo run it: Kubernetes 1.36's GenericWorkload/GangScheduling
          feature gates and scheduling.k8s.io/v1alpha2 served; the operator creates a PodGroup with gang
          minCount N per attempt and joins every pod to it (status.scheduling.gang PodGroup)
  nogang  ClusterConfig(gang_scheduling=False): no gates, the API not served; the operator creates the
          same pods without a group and the scheduler binds them one by one (status.scheduling.gang None),
          today's path on every cluster without the API
Why two clusters and not one: the operator has no per-job way out of the native gang (every job gangs
where the API is served, by design), and the non-gang path users get is a cluster without the API, its
scheduler without the gates. Same binaries, flags, node count and operator otherwise.

From raw watches in this process, seconds from the create request to:
  created     all N pods exist
  first_bound the first pod has spec.nodeName
  scheduled   all N pods have spec.nodeName
  running     all N pods are Running
  status      the TrainingJob says Running
  (gang only) group_scheduled: the PodGroup's PodGroupScheduled condition turned True
and kube-scheduler's own view over each run (its /metrics before and after): scheduling attempts by
result, the attempts' summed duration, and every pod-group/workload series it exports.
Writes .cache/bench/gang.json; report.py renders it. `make bench` runs it; tests/bench runs
an 8-node smoke.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import RawWatch, machine, wait_on
from startup import Harness

from multinode.api import GROUP, PLURAL, VERSION
from multinode.api.constants import POD_GROUP_API_GROUP, POD_GROUP_API_VERSION, POD_GROUP_PLURAL

OUT = REPO / ".cache" / "bench" / "gang.json"
MODES = ("gang", "nogang")
MILESTONES = ("created", "first_bound", "scheduled", "running", "status")
# Scheduler series kept (counters and histogram sums/counts, as deltas over a run): the attempts, their
# duration, and whatever the scheduler exports about pod groups and workloads.
KEEP = ("scheduler_schedule_attempts", "scheduler_scheduling_attempt_duration_seconds",
        "scheduler_pod_scheduling_sli_duration_seconds", "scheduler_pod_scheduling_attempts",
        "scheduler_queue_incoming_pods", "scheduler_preemption_attempts", "scheduler_plugin_evaluation_total")
KEEP_WORDS = ("pod_group", "podgroup", "workload", "gang")


def scheduler_series(text: str) -> dict[str, float]:
    """Cumulative scheduler samples worth a delta: `name{label=value,...}` → value (no histogram buckets)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if not (family.name.startswith(KEEP) or any(w in family.name for w in KEEP_WORDS)):
            continue
        if family.type not in ("counter", "histogram", "summary"):
            continue
        for s in family.samples:
            if s.name.endswith("_bucket") or s.name.endswith("_created"):
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "profile")
            key = f"{s.name}{{{labels}}}"
            out[key] = out.get(key, 0.0) + s.value
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 6) for k, v in sorted(after.items()) if v - before.get(k, 0.0)}


class GroupClock:
    """When each PodGroup's PodGroupScheduled condition was first seen True (monotonic)."""

    def __init__(self, cond: threading.Condition):
        self.cond = cond
        self.scheduled: dict[str, float] = {}

    def event(self, _kind: str, obj: dict, now: float) -> None:
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "PodGroupScheduled" and c.get("status") == "True" for c in conditions):
            with self.cond:
                self.scheduled.setdefault(obj["metadata"]["name"], now)
                self.cond.notify_all()


def run_mode(mode: str, n: int, runs: int, gpus: int, timeout: float) -> dict:
    h = Harness(n, systems=("ours",), gpus_per_node=gpus, gang_scheduling=mode == "gang", audit_log=False)
    groups = GroupClock(h.clock.cond)
    results: list[dict] = []
    try:
        h.start()
        ns = h.ns["ours"]
        if mode == "gang":
            h.watches.append(RawWatch(
                h.api, f"/apis/{POD_GROUP_API_GROUP}/{POD_GROUP_API_VERSION}/namespaces/{ns}/{POD_GROUP_PLURAL}",
                groups.event).start())
        # A 1-node job first, not measured: the first job after an operator's start pays for warming up
        # (seen: 2 s to create 8 pods, then 0.06 s), on both sides alike.
        # The job's own default: the native gang where the cluster serves it (the startup bench turns it off).
        h.create("ours", "warmup", 1, gpus, scheduling={"nativePodGroup": True})
        h.clock.wait(lambda: h.milestones("ours", "warmup", 1, 0.0), timeout, f"{mode} warm-up job to start")
        h.delete("ours", "warmup")
        h.wait_pods_gone("ours", timeout)
        for i in range(runs):
            name = f"{mode}-{n}-r{i}"
            before = scheduler_series(h.cluster.scheduler_metrics())
            t0 = time.monotonic()
            h.create("ours", name, n, gpus, scheduling={"nativePodGroup": True})
            r = h.clock.wait(lambda name=name, t0=t0: h.milestones("ours", name, n, t0), timeout,
                             f"{mode} {name} to start")
            pods = h.clock.of(("ours", name))
            r["first_bound"] = min(p["scheduled"] for p in pods) - t0
            job = h.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            scheduling = (job.get("status") or {}).get("scheduling") or {}
            r["gang_mode"] = scheduling.get("gang")
            if mode == "gang":
                group = scheduling.get("podGroup")
                t = wait_on(h.clock.cond, lambda group=group: groups.scheduled.get(group), 30,
                            f"PodGroup {group} PodGroupScheduled=True")
                r["group_scheduled"] = t - t0
            r["scheduler"] = delta(before, scheduler_series(h.cluster.scheduler_metrics()))
            results.append(r)
            print(f"  {n:>5} nodes {mode:>6} run {i}: " + " ".join(f"{m} {r[m]:.2f}s" for m in MILESTONES)
                  + f" (gang {r['gang_mode']})", flush=True)
            h.delete("ours", name)
            h.wait_pods_gone("ours", timeout)
    finally:
        h.stop()
    return {"mode": mode, "runs": results,
            "median_s": {m: statistics.median(r[m] for r in results)
                         for m in (*MILESTONES, *(("group_scheduled",) if mode == "gang" else ()))}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per pod (8 = one pod per 8-GPU node)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    faulthandler.register(signal.SIGUSR1)
    results = [run_mode(mode, args.nodes, args.runs, args.gpus, args.timeout) for mode in args.modes]
    by_mode = {r["mode"]: r for r in results}
    ratio = ({m: by_mode["gang"]["median_s"][m] / by_mode["nogang"]["median_s"][m] for m in MILESTONES}
             if len(by_mode) == 2 else {})
    print(f"\n{args.nodes} nodes, medians of {args.runs} (s): " + "  ".join(f"{m:>12}" for m in args.modes)
          + ("   gang/nogang" if ratio else ""))
    for m in MILESTONES:
        print(f"{m:>12}: " + "  ".join(f"{by_mode[mode]['median_s'][m]:>12.2f}" for mode in args.modes)
              + (f"  {ratio[m]:>12.2f}" if ratio else ""))
    from localcluster.binaries import read_versions

    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join([".venv/bin/python -P tools/bench/gang.py", *(argv if argv is not None else sys.argv[1:])])
    args.out.write_text(json.dumps({
        "machine": machine(), "versions": read_versions(), "nodes": args.nodes, "runs_per_mode": args.runs,
        "gpus_per_pod": args.gpus, "modes": list(args.modes), "results": results, "ratio_gang_to_nogang": ratio,
        "command": command}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
