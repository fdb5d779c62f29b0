"""Benchmark: one huge job (10 000 nodes) created and all Running, and the operator's peak memory.

    .venv/bin/python -P tools/bench/huge.py [--nodes 10000] [--kwok-nodes N] [--rss-jobs 100]
                                            [--rss-job-nodes 16]

Starts a local cluster of its own: `--kwok-nodes` fake nodes (kwok, no GPUs; by default one per pod of
the huge job). A job's pods never share a node (required anti-affinity on the hostname), so the cluster
needs at least as many nodes as the biggest job; the many small jobs share them.
Then, each time with a fresh operator process so that its high-water mark (VmHWM) is this load's:

  many   `--rss-jobs` jobs × `--rss-job-nodes` pods created at once, until every job reports Running;
  huge   one job of `--nodes` pods, from the create request until all pods exist (created), have a node
         (scheduled), are Running (running), and the job's status says Running with every node ready.

Milestones come from raw watches in this process, kept as counters (a per-event scan of 10 000 pods would
cost this process more CPU than the operator's). Writes .cache/bench/huge.json; `make bench` runs it,
tests/bench runs a small smoke of it.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client
from localcluster import ClusterConfig, LocalCluster, NodePoolConfig

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import BENCH_NODE_MONITOR_GRACE, RawWatch, identity, machine, rss_now_mb, rss_peak_mb, wait_established
from localcluster.harness.kube import kubectl, new_namespace
from localcluster.harness.operator import CRD_FILE, OperatorProcess
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for

from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION

OUT = REPO / ".cache" / "bench" / "huge.json"
MILESTONES = ("created", "scheduled", "running", "status")


class Counts:
    """Per job: how many pods reached each milestone, and when the last of `want` did (monotonic)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[str, dict] = {}  # job → {"want": n, "t": {milestone: time}}

    def expect(self, job: str, want: int) -> None:
        with self.lock:
            self.jobs[job] = {"want": want, "t": {}, "pods": {m: set() for m in MILESTONES[:3]}}

    def pod_event(self, kind: str, pod: dict, now: float) -> None:
        job = (pod["metadata"].get("labels") or {}).get(LABEL_JOB_NAME)
        with self.lock:
            rec = self.jobs.get(job or "")
            if rec is None or kind == "DELETED":
                return
            uid = pod["metadata"]["uid"]
            reached = {"created": True, "scheduled": bool((pod.get("spec") or {}).get("nodeName")),
                       "running": (pod.get("status") or {}).get("phase") == "Running"}
            for m, yes in reached.items():
                if yes and uid not in rec["pods"][m]:
                    rec["pods"][m].add(uid)
                    if len(rec["pods"][m]) == rec["want"]:
                        rec["t"][m] = now

    def job_event(self, obj: dict, now: float) -> None:
        status = obj.get("status") or {}
        with self.lock:
            rec = self.jobs.get(obj["metadata"]["name"])
            if rec is not None and status.get("phase") == "Running" and status.get("readyNodes") == rec["want"]:
                rec["t"].setdefault("status", now)

    def done(self, job: str) -> bool:
        with self.lock:
            return all(m in self.jobs[job]["t"] for m in MILESTONES)

    def progress(self, job: str) -> str:
        with self.lock:
            rec = self.jobs[job]
            return ", ".join(f"{m} {len(p)}" for m, p in rec["pods"].items())


def wait(predicate, timeout: float, what: str, report=None) -> None:
    deadline, last = time.monotonic() + timeout, time.monotonic()
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}" + (f" ({report()})" if report else ""))
        if report and time.monotonic() - last > 30:
            print(f"    … {report()}", flush=True)
            last = time.monotonic()
        time.sleep(0.2)


class Bench:
    def __init__(self, kwok_nodes: int, pods_per_node: int, total_pods: int):
        self.cluster = LocalCluster(ClusterConfig(
            name=f"huge-{uuid.uuid4().hex[:6]}", die_with_parent=True,
            node_monitor_grace_period=BENCH_NODE_MONITOR_GRACE,
            ready_timeout_seconds=max(120.0, kwok_nodes * 0.3),
            nodes=NodePoolConfig(count=kwok_nodes, gpus_per_node=0, rdma_per_node=0, max_pods=pods_per_node,
                                 cpu=str(max(96, total_pods)), memory="64Ti")))
        self.counts = Counts()
        self.watches: list[RawWatch] = []
        self.operator: OperatorProcess | None = None

    def start(self) -> None:
        c = self.cluster
        c.start()
        kc = str(c.kubeconfig)
        self.api = c.api_client()
        self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        kubectl(kc, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        wait_established(kc, "trainingjobs.multinode.dev")
        self.ns = new_namespace(self.core, prefix="huge")
        self.op_kc, _ = identity(c, self.core, client.RbacAuthorizationV1Api(self.api), "multinode-operator")
        self.watches = [
            RawWatch(self.api, f"/api/v1/namespaces/{self.ns}/pods", self.counts.pod_event).start(),
            RawWatch(self.api, f"/apis/{GROUP}/{VERSION}/namespaces/{self.ns}/{PLURAL}",
                     lambda _kind, obj, now: self.counts.job_event(obj, now)).start(),
        ]

    def fresh_operator(self, label: str) -> int:
        if self.operator is not None:
            self.operator.stop()
        self.operator = OperatorProcess(self.op_kc, [self.ns], self.cluster.dir / "logs" / f"operator-{label}.log")
        self.operator.start()
        return self.operator.proc.pid

    def create(self, name: str, nodes: int) -> None:
        body = training_job(name, nodes, gpus=0)
        # The alpha scheduler does not place a 10 000-pod native gang (docs/benchmarks.md, gang): a job this
        # large turns it off, as the user guide says.
        body["spec"]["scheduling"] = {"nativePodGroup": False}
        # kwok runs no containers: the recreate path (named: InPlace is the default on these nodes).
        body["spec"]["failurePolicy"] = {"maxRestarts": 1000, "backoff": {"initialSeconds": 0, "maxSeconds": 0},
                                         "restartStrategy": "BlockingRecreate"}
        self.counts.expect(name, nodes)
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body)

    def status(self, name: str) -> dict:
        raw = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name, _preload_content=False)
        return json.loads(raw.data).get("status") or {}

    def delete_all(self, timeout: float) -> None:
        self.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL,
                                                               propagation_policy="Background")
        self.core.delete_collection_namespaced_pod(self.ns, grace_period_seconds=0)
        wait_for(lambda: not json.loads(self.core.list_namespaced_pod(self.ns, limit=1, _preload_content=False).data)[
            "items"], timeout=timeout, what="the bench's pods gone", interval=0.5)

    def stop(self) -> None:
        for w in self.watches:
            w.stop()
        if self.operator is not None:
            self.operator.stop()
        self.cluster.stop()


def many(b: Bench, jobs: int, nodes: int, timeout: float) -> dict:
    pid = b.fresh_operator("many")
    idle = rss_now_mb(pid)
    names = [f"m-{i}" for i in range(jobs)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: b.create(n, nodes), names))
    wait(lambda: all(b.counts.done(n) for n in names), timeout, f"{jobs} jobs Running")
    elapsed = max(b.counts.jobs[n]["t"]["status"] for n in names) - t0
    time.sleep(5)
    return {"jobs": jobs, "pods_per_job": nodes, "all_running_s": elapsed, "idle_rss_mb": idle,
            "peak_rss_mb": rss_peak_mb(pid), "rss_after_mb": rss_now_mb(pid)}


def huge(b: Bench, nodes: int, timeout: float) -> dict:
    pid = b.fresh_operator("huge")
    idle = rss_now_mb(pid)
    t0 = time.monotonic()
    b.create("huge", nodes)
    timed_out = None
    try:
        wait(lambda: b.counts.done("huge"), timeout, f"a {nodes}-node job Running", lambda: b.counts.progress("huge"))
        time.sleep(5)
    except TimeoutError as e:  # what was reached is still a figure: recorded, with the reason
        timed_out = f"{e}; reached: {b.counts.progress('huge')}"
        print(f"  {timed_out}", flush=True)
    at = {m: t - t0 for m, t in b.counts.jobs["huge"]["t"].items()}
    status = b.status("huge")
    return {"nodes": nodes, "milestones_s": at, "timed_out": timed_out, "timeout_s": timeout,
            "pods_per_s_running": nodes / at["running"] if "running" in at else None, "idle_rss_mb": idle,
            "peak_rss_mb": rss_peak_mb(pid), "rss_after_mb": rss_now_mb(pid), "status_bytes": len(json.dumps(status)),
            "gang": (status.get("scheduling") or {}).get("gang"), "restarts": status.get("restarts", 0)
            + status.get("uncountedRestarts", 0)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--kwok-nodes", type=int, default=None, help="default: --nodes (one pod per node)")
    parser.add_argument("--rss-jobs", type=int, default=100)
    parser.add_argument("--rss-job-nodes", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through `finally`: cluster stopped
    args.kwok_nodes = args.kwok_nodes or args.nodes
    biggest = max(args.nodes, args.rss_job_nodes)
    if args.kwok_nodes < biggest:
        parser.error(f"--kwok-nodes {args.kwok_nodes}: a job of {biggest} nodes needs as many (one pod per node)")
    most = max(args.nodes, args.rss_jobs * args.rss_job_nodes)
    per_node = math.ceil(most / args.kwok_nodes) + 10
    b = Bench(args.kwok_nodes, per_node, most)
    started = time.monotonic()
    try:
        b.start()
        print(f"cluster of {args.kwok_nodes} kwok nodes ({per_node} pods each) up in "
              f"{time.monotonic() - started:.0f}s", flush=True)
        memory = None
        if args.rss_jobs:  # --rss-jobs 0: only the huge job
            memory = many(b, args.rss_jobs, args.rss_job_nodes, args.timeout)
            print(f"  {args.rss_jobs} jobs × {args.rss_job_nodes} pods: all Running in {memory['all_running_s']:.1f}s, "
                  f"operator peak RSS {memory['peak_rss_mb']:.0f} MB", flush=True)
            b.delete_all(args.timeout)
        one = huge(b, args.nodes, args.timeout)
        print(f"  one {args.nodes}-node job: " + ", ".join(f"{m} {one['milestones_s'][m]:.1f}s" for m in MILESTONES
                                                            if m in one["milestones_s"])
              + f"; operator peak RSS {one['peak_rss_mb']:.0f} MB; status {one['status_bytes']} bytes; "
              f"gang {one['gang']}; restarts {one['restarts']}", flush=True)
    finally:
        b.stop()
    from localcluster.binaries import read_versions

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine(), "versions": read_versions(), "kwok_nodes": args.kwok_nodes,
                                    "pods_per_kwok_node": per_node, "many": memory, "huge": one}, indent=2))
    print(f"wrote {args.out} (whole run {time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
