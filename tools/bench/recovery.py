"""Benchmark: a pod fails → the replacement gang is created. For 8 and 64 nodes, ≥ 20 trials each.

    .venv/bin/python -P tools/bench/recovery.py [--nodes 8 64] [--trials 20] [--reuse]

Runs on a local cluster of its own (or the `make cluster-up` one with --reuse) with the operator as a
local process. Each trial ends one pod of the running attempt with exit code 1 (kwok) and measures,
from a watch on the job's pods in this process:
  failure → gang   from the watch event that shows the pod Failed (the apiserver has recorded the
                   failure) to the event in which the last pod of the next attempt was created;
  gone → gang      from the moment the last pod of the old attempt was deleted to the same point
                   (the default BlockingRecreate waits for the old pods first).
Backoff is set to 0, so what is measured is the operator and the control plane, not a policy delay.
Prints median and p99 and writes .cache/bench/recovery.json. `make bench` runs it; tests/bench
runs a small smoke of it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import uuid
from pathlib import Path

import yaml
from kubernetes import client
from localcluster import ClusterConfig, LocalCluster

from multinode.api import GROUP, PLURAL, VERSION

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import RawWatch, wait_on
from localcluster.harness.kube import kubectl, new_namespace
from localcluster.harness.operator import CRD_FILE, OperatorProcess
from multinode.testing import training_job

OUT = REPO / ".cache" / "bench" / "recovery.json"


class PodClock:
    """Watches a namespace's pods and timestamps (monotonic) what the trials wait for.

    A raw watch (plain JSON, re-listing when the stream breaks): the kubernetes client's typed watch
    ended silently mid-run once (its thread swallowed the error), and every later wait timed out."""

    def __init__(self, api: client.ApiClient, namespace: str):
        self.cond = threading.Condition()
        self.failed_at: dict[str, float] = {}
        self.created_at: dict[str, float] = {}
        self.deleted_at: dict[str, float] = {}
        self._watch = RawWatch(api, f"/api/v1/namespaces/{namespace}/pods", self._event).start()

    def _event(self, kind: str, pod: dict, now: float) -> None:
        name = pod["metadata"]["name"]
        with self.cond:
            # A re-list after a broken stream replays existing pods as ADDED: the first sighting counts.
            self.created_at.setdefault(name, now)
            if kind == "DELETED":
                self.deleted_at.setdefault(name, now)
            if (pod.get("status") or {}).get("phase") == "Failed":
                self.failed_at.setdefault(name, now)
            self.cond.notify_all()

    def wait(self, predicate, timeout: float = 120.0):
        return wait_on(self.cond, predicate, timeout, "a recovery milestone")

    def stop(self) -> None:
        self._watch.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_size(api: client.ApiClient, kubeconfig: str, num_nodes: int, trials: int, log_dir: Path) -> dict:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = new_namespace(core, prefix="bench")
    operator = OperatorProcess(kubeconfig, [ns], log_dir / f"operator-{num_nodes}.log")
    operator.start()
    clock = PodClock(api, ns)
    name = f"rec{num_nodes}"
    job = training_job(name, num_nodes, gpus=0, image="registry.example/train:1", command=None,
                       # kwok runs no containers: the recreate path (named: InPlace is the default on these nodes).
                       failurePolicy={"maxRestarts": 1000, "backoff": {"initialSeconds": 0, "maxSeconds": 0},
                                      "restartStrategy": "BlockingRecreate"})
    kubectl(kubeconfig, "apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job))
    fail_to_gang, gone_to_gang = [], []

    def running() -> bool:
        stored = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        return (stored.get("status") or {}).get("phase") == "Running"

    try:
        for attempt in range(trials + 1):
            pods = [f"{name}-{i}-a{attempt}" for i in range(num_nodes)]
            clock.wait(lambda: all(p in clock.created_at for p in pods))  # noqa: B023 - called before the loop moves on
            clock.wait(running)
            if attempt > 0:
                old = [f"{name}-{i}-a{attempt - 1}" for i in range(num_nodes)]
                victim = f"{name}-1-a{attempt - 1}"
                gang_done = max(clock.created_at[p] for p in pods)
                fail_to_gang.append(gang_done - clock.failed_at[victim])
                gone = [clock.deleted_at[p] for p in old if p in clock.deleted_at]
                if len(gone) >= num_nodes - 1:  # the failed pod itself stays for its logs
                    gone_to_gang.append(gang_done - max(gone))
            if attempt == trials:
                break
            core.patch_namespaced_pod(f"{name}-1-a{attempt}", ns, {"metadata": {"annotations": {
                "localcluster.multinode.dev/finish-after": "0s", "localcluster.multinode.dev/exit-code": "1"}}})
    finally:
        clock.stop()
        operator.stop()
        core.delete_namespace(ns)
    return {
        "nodes": num_nodes, "trials": len(fail_to_gang),
        "failure_to_gang_s": {"median": statistics.median(fail_to_gang), "p99": percentile(fail_to_gang, 0.99),
                              "all": fail_to_gang},
        "old_gone_to_gang_s": {"median": statistics.median(gone_to_gang), "p99": percentile(gone_to_gang, 0.99),
                               "all": gone_to_gang} if gone_to_gang else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--reuse", action="store_true", help="use the running `make cluster-up` cluster")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    cluster = LocalCluster(ClusterConfig(name="default" if args.reuse else f"bench-{uuid.uuid4().hex[:6]}",
                                         die_with_parent=not args.reuse))
    own = not (args.reuse and cluster.is_running())
    if own:
        cluster.start()
    try:
        kc = str(cluster.kubeconfig)
        kubectl(kc, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        kubectl(kc, "wait", "--for=condition=Established", "--timeout=60s", "crd/trainingjobs.multinode.dev")
        results = [run_size(cluster.api_client(), kc, n, args.trials, cluster.dir / "logs") for n in args.nodes]
    finally:
        if own:
            cluster.stop()
            shutil.rmtree(cluster.dir, ignore_errors=True)
    print(f"{'nodes':>6} {'trials':>6} {'fail→gang median':>18} {'p99':>8} {'gone→gang median':>18} {'p99':>8}")
    for r in results:
        gone = r["old_gone_to_gang_s"] or {"median": float("nan"), "p99": float("nan")}
        print(f"{r['nodes']:>6} {r['trials']:>6} {r['failure_to_gang_s']['median']:>17.3f}s "
              f"{r['failure_to_gang_s']['p99']:>7.3f}s {gone['median']:>17.3f}s {gone['p99']:>7.3f}s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": f"{os.cpu_count()} cores", "results": results}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
