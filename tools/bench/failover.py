"""Benchmark: the leader replica dies → the standby leads and acts. ≥ 10 trials, client-go's stock timings.

    .venv/bin/python -P tools/bench/failover.py [--trials 10] [--term-trials 5] [--nodes 4]
        [--lease-duration 15 --renew-deadline 10 --retry-period 2] [--reuse]

Runs on a local cluster of its own (or the `make cluster-up` one with --reuse) with two operator
processes competing for one Lease (leader election as the chart configures it). Each trial:

  kill   SIGKILL the leader (no release: the Lease must expire), and at once create a TrainingJob of
         `--nodes` nodes; measure from the kill to
           leading   the standby's multinode_leader gauge reads 1 (polled every 50 ms), and
           acting    the last pod of the new job created (a watch on the namespace's pods);
         then start a replacement replica (the next trial's standby), as the Deployment would.
  term   the same with SIGTERM: the leader stops its workers and releases the Lease, so the standby
         takes over at its next retry, not after the lease duration.

With stock timings a kill costs about the lease duration (15 s, less the time since the last renewal
the standby saw) plus the new leader's start (kopf lists jobs, pods, nodes and services) and the
job's reconcile. Prints median and p99 and writes .cache/bench/failover.json. `make bench` runs it;
tests/bench runs a smoke of it with short timings.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

import yaml
from kubernetes import client
from localcluster import ClusterConfig, LocalCluster

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import RawWatch, wait_on
from localcluster.harness.kube import kubectl, new_namespace
from localcluster.harness.operator import CRD_FILE, OperatorProcess, leader_election_env
from multinode.testing import training_job

OUT = REPO / ".cache" / "bench" / "failover.json"
POLL_SECONDS = 0.05


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "p99": percentile(values, 0.99), "worst": max(values),
            "all": values}


class PodClock:
    """When each pod of the namespace was first seen (monotonic), from a watch in this process."""

    def __init__(self, api: client.ApiClient, namespace: str):
        self.cond = threading.Condition()
        self.created_at: dict[str, float] = {}
        self._watch = RawWatch(api, f"/api/v1/namespaces/{namespace}/pods", self._event).start()

    def _event(self, kind: str, pod: dict, now: float) -> None:
        with self.cond:
            self.created_at.setdefault(pod["metadata"]["name"], now)
            self.cond.notify_all()

    def all_created(self, names: list[str], timeout: float) -> float:
        wait_on(self.cond, lambda: all(n in self.created_at for n in names), timeout, "the new job's pods")
        with self.cond:
            return max(self.created_at[n] for n in names)

    def stop(self) -> None:
        self._watch.stop()


class Replicas:
    def __init__(self, kubeconfig: str, namespace: str, log_dir: Path, timings: dict[str, float]):
        self.kubeconfig, self.namespace, self.log_dir, self.timings = kubeconfig, namespace, log_dir, timings
        self.running: list[OperatorProcess] = []
        self._ids = itertools.count()

    def start(self) -> OperatorProcess:
        identity = f"replica-{next(self._ids)}"
        env = leader_election_env(self.namespace, identity, **self.timings)
        op = OperatorProcess(self.kubeconfig, [self.namespace], self.log_dir / f"failover-{identity}.log",
                             extra_env=env)
        op.start()  # healthy: a standby answers /healthz while it waits for the Lease
        self.running.append(op)
        return op

    def leader(self, timeout: float) -> OperatorProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leading = [op for op in self.running if op.leading()]
            if len(leading) > 1:
                raise AssertionError("two replicas lead at once")
            if leading:
                return leading[0]
            time.sleep(POLL_SECONDS)
        raise TimeoutError("no replica leads")

    def stop(self) -> None:
        for op in self.running:
            op.stop()
        self.running.clear()


def trial(replicas: Replicas, clock: PodClock, name: str, nodes: int, how: str, timeout: float) -> dict:
    leader = replicas.leader(timeout)
    (standby,) = [op for op in replicas.running if op is not leader]
    # The standby has read the Lease at least once (it answers /healthz from before its first read: give it
    # a retry period), so its clock runs from the leader's renewals, as in a long-running Deployment.
    time.sleep(replicas.timings["retry_period"] * 1.5)
    job = training_job(name, nodes, gpus=0, image="registry.example/train:1", command=None)
    manifest = yaml.safe_dump(job)
    assert leader.proc is not None
    start = time.monotonic()
    if how == "kill":
        leader.proc.kill()
    else:
        leader.proc.terminate()
    kubectl(replicas.kubeconfig, "apply", "-n", replicas.namespace, "-f", "-", input=manifest)
    deadline = start + timeout
    exited = None  # when the old leader's process was seen gone
    while not standby.leading():
        if exited is None and leader.proc.poll() is not None:
            exited = time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the standby did not lead within {timeout} s (log: {standby.log_path})")
        time.sleep(POLL_SECONDS)
    leading = time.monotonic() - start
    if exited is None and leader.proc.poll() is not None:
        exited = time.monotonic()
    acting = clock.all_created([f"{name}-{i}-a0" for i in range(nodes)], timeout) - start
    leader.proc.wait(timeout=60)
    replicas.running.remove(leader)
    replicas.start()  # the replacement pod, the next trial's standby
    print(f"  {how} {name}: leading after {leading:.2f} s, the new job's {nodes} pods created after {acting:.2f} s",
          flush=True)
    # From the old leader's exit to the standby leading: ≈ a retry period when the Lease was released (SIGTERM),
    # up to the lease duration when it had to expire; None when the standby led before the exit was seen.
    after_exit = None if exited is None else max(0.0, start + leading - exited)
    return {"leading_s": leading, "acting_s": acting, "exit_to_leading_s": after_exit}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10, help="SIGKILL trials")
    parser.add_argument("--term-trials", type=int, default=5, help="SIGTERM (graceful, Lease released) trials")
    parser.add_argument("--nodes", type=int, default=4, help="nodes of the job created after each kill")
    parser.add_argument("--lease-duration", type=float, default=15)
    parser.add_argument("--renew-deadline", type=float, default=10)
    parser.add_argument("--retry-period", type=float, default=2)
    parser.add_argument("--reuse", action="store_true", help="use the running `make cluster-up` cluster")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    timings = {"duration": args.lease_duration, "renew_deadline": args.renew_deadline,
               "retry_period": args.retry_period}
    cluster = LocalCluster(ClusterConfig(name="default" if args.reuse else f"bench-{uuid.uuid4().hex[:6]}",
                                         die_with_parent=not args.reuse))
    own = not (args.reuse and cluster.is_running())
    if own:
        cluster.start()
    results: dict[str, list[dict]] = {"kill": [], "term": []}
    try:
        kc = str(cluster.kubeconfig)
        kubectl(kc, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        kubectl(kc, "wait", "--for=condition=Established", "--timeout=60s", "crd/trainingjobs.multinode.dev")
        api = cluster.api_client()
        core = client.CoreV1Api(api)
        ns = new_namespace(core, prefix="failover")
        clock = PodClock(api, ns)
        replicas = Replicas(kc, ns, cluster.dir / "logs", timings)
        timeout = args.lease_duration * 4 + 60
        try:
            replicas.start()
            replicas.start()
            plan = [("kill", i) for i in range(args.trials)] + [("term", i) for i in range(args.term_trials)]
            for how, i in plan:
                results[how].append(trial(replicas, clock, f"{how}{i}", args.nodes, how, timeout))
        finally:
            clock.stop()
            replicas.stop()
            core.delete_namespace(ns)
    finally:
        if own:
            cluster.stop()
            shutil.rmtree(cluster.dir, ignore_errors=True)
    report = {
        "machine": f"{os.cpu_count()} cores",
        "command": "python -P tools/bench/failover.py " + " ".join(sys.argv[1:]),
        "timings": {"lease_duration_s": args.lease_duration, "renew_deadline_s": args.renew_deadline,
                    "retry_period_s": args.retry_period},
        "nodes_per_job": args.nodes,
        "results": {how: {"trials": len(r), "leading_s": summary([t["leading_s"] for t in r]),
                          "acting_s": summary([t["acting_s"] for t in r]),
                          "exit_to_leading_s": [t["exit_to_leading_s"] for t in r]} if r else None
                    for how, r in results.items()},
    }
    print(f"{'signal':>6} {'trials':>6} {'→ leading median':>17} {'p99':>7} {'→ pods created median':>22} {'p99':>7}")
    for how, r in report["results"].items():
        if r:
            print(f"{how:>6} {r['trials']:>6} {r['leading_s']['median']:>16.2f}s {r['leading_s']['p99']:>6.2f}s "
                  f"{r['acting_s']['median']:>21.2f}s {r['acting_s']['p99']:>6.2f}s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
