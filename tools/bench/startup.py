"""Benchmark: start latency of one N-node job, ours (TrainingJob) against JobSet, and the API cost per pod.

    .venv/bin/python -P tools/bench/startup.py [--sizes 16 128 1000] [--runs 5] [--gpus 8]

Starts a local cluster of its own with max(sizes) fake 8-GPU nodes (kwok; pods start at once) and an
apiserver audit log, installs both CRDs and runs the multinode operator and the JobSet controller side by
side, each under its own ServiceAccount. For every size it alternates runs of the two systems (who goes
first alternates too), `--runs` each, one job at a time, every job asking for `--gpus` GPUs per pod (8:
one pod per node). From raw watches in this process it measures, from the create request:
  created    all N pods exist
  scheduled  all N pods have a node
  running    all N pods are Running
  status     the job says so (TrainingJob phase Running; JobSet: every replicated Job ready)
and, from the audit log, the controllers' requests during each run (apply → status + 2 s): ours is the
operator's identity; JobSet's is its controller plus kube-controller-manager's Job controller, which
creates its pods. Prints medians and ours/JobSet ratios, writes .cache/bench/startup.json.
Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import faulthandler
import shutil
import signal
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from kubernetes import client
from localcluster import ClusterConfig, LocalCluster, NodePoolConfig

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import (  # noqa: E402
    JOB_CONTROLLER_USER, JOBSET_GROUP, JOBSET_NAME_LABEL, JOBSET_PLURAL, JOBSET_RESTART_LABEL, JOBSET_VERSION, Clock, JobSetProcess,
    RawWatch, audit_counts, identity, install_jobset_crds, jobset_manifest, jobset_running, machine,
    rss_peak_mb, summarize_counts, trainingjob_running,
)
from tests.support.jobs import training_job  # noqa: E402
from tests.support.kube import kubectl, new_namespace  # noqa: E402
from tests.support.operator import CRD_FILE, OperatorProcess  # noqa: E402

from multinode.api import GROUP, LABEL_ATTEMPT, LABEL_JOB_NAME, PLURAL, VERSION  # noqa: E402

OUT = REPO / ".cache" / "bench" / "startup.json"
MILESTONES = ("created", "scheduled", "running", "status")


class Harness:
    """A cluster with both systems running, one namespace each, and watches feeding one Clock."""

    def __init__(self, max_nodes: int, name: str | None = None, gpus_per_node: int = 8, by_attempt: bool = False):
        # by_attempt: pods are keyed (system, job, attempt) instead of (system, job), for restart trials.
        self.by_attempt = by_attempt
        self.cluster = LocalCluster(ClusterConfig(
            name=name or f"bench-{uuid.uuid4().hex[:6]}", die_with_parent=True, audit_log=True,
            ready_timeout_seconds=max(120.0, max_nodes * 0.3),
            nodes=NodePoolConfig(count=max_nodes, gpus_per_node=gpus_per_node, rdma_per_node=0)))
        self.clock = Clock()
        self.watches: list[RawWatch] = []
        self.operator: OperatorProcess | None = None
        self.jobset: JobSetProcess | None = None

    def start(self) -> None:
        c = self.cluster
        c.start()
        kc = str(c.kubeconfig)
        self.api = c.api_client()
        self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        rbac = client.RbacAuthorizationV1Api(self.api)
        kubectl(kc, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        kubectl(kc, "wait", "--for=condition=Established", "--timeout=60s", "crd/trainingjobs.multinode.dev")
        install_jobset_crds(kc)
        self.ns = {"ours": new_namespace(self.core, prefix="ours"), "jobset": new_namespace(self.core, prefix="jobset")}
        op_kc, self.op_user = identity(c, self.core, rbac, "multinode-operator")
        js_kc, self.js_user = identity(c, self.core, rbac, "jobset-controller")
        self.operator = OperatorProcess(op_kc, [self.ns["ours"]], c.dir / "logs" / "operator.log")
        self.operator.start()
        self.jobset = JobSetProcess(js_kc, c.dir)
        self.jobset.start()
        ours, js = self.ns["ours"], self.ns["jobset"]

        def our_pod(pod):
            labels = pod["metadata"].get("labels", {})
            key = ("ours", labels.get(LABEL_JOB_NAME))
            return key + (int(labels.get(LABEL_ATTEMPT, -1)),) if self.by_attempt else key

        def js_pod(pod):
            labels = pod["metadata"].get("labels", {})
            key = ("jobset", labels.get(JOBSET_NAME_LABEL))
            return key + (int(labels.get(JOBSET_RESTART_LABEL, -1)),) if self.by_attempt else key

        self.watches = [
            RawWatch(self.api, f"/api/v1/namespaces/{ours}/pods",
                     lambda k, o, t: self.clock.pod_event(k, o, t, our_pod)).start(),
            RawWatch(self.api, f"/api/v1/namespaces/{js}/pods",
                     lambda k, o, t: self.clock.pod_event(k, o, t, js_pod)).start(),
            RawWatch(self.api, f"/apis/{GROUP}/{VERSION}/namespaces/{ours}/{PLURAL}",
                     lambda k, o, t: self.clock.job_event(("ours", o["metadata"]["name"]), trainingjob_running(o), t)).start(),
            RawWatch(self.api, f"/apis/{JOBSET_GROUP}/{JOBSET_VERSION}/namespaces/{js}/{JOBSET_PLURAL}",
                     lambda k, o, t: self.clock.job_event(("jobset", o["metadata"]["name"]), jobset_running(o), t)).start(),
        ]

    def users(self, system: str) -> set[str]:
        return {self.op_user} if system == "ours" else {self.js_user, JOB_CONTROLLER_USER}

    def create(self, system: str, name: str, num_nodes: int, gpus: int, **spec) -> None:
        ns = self.ns[system]
        if system == "ours":
            body = training_job(name, num_nodes, gpus=gpus, **spec)
            body["spec"].setdefault("failurePolicy", {"maxRestarts": 1000, "backoff": {"initialSeconds": 0, "maxSeconds": 0}})
            self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        else:
            self.custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL,
                                                        jobset_manifest(name, num_nodes, gpus))

    def delete(self, system: str, name: str) -> None:
        ns = self.ns[system]
        group, version, plural = (GROUP, VERSION, PLURAL) if system == "ours" else (JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL)
        self.custom.delete_namespaced_custom_object(group, version, ns, plural, name,
                                                    body={"propagationPolicy": "Background"})

    def milestones(self, system: str, name: str, num_nodes: int, t0: float) -> dict | None:
        """Seconds from t0 to each milestone, or None while one is missing."""
        key = (system, name)
        pods = self.clock.of(key)
        if len(pods) < num_nodes:
            return None
        out = {}
        for m in ("created", "scheduled", "running"):
            times = [p.get(m) for p in pods]
            if any(t is None for t in times):
                return None
            out[m] = max(sorted(times)[:num_nodes]) - t0
        st = self.clock.status.get(key, {}).get("running")
        if st is None:
            return None
        out["status"] = st - t0
        return out

    def run_once(self, system: str, name: str, num_nodes: int, gpus: int, timeout: float) -> tuple[dict, tuple[float, float]]:
        wall0, t0 = time.time(), time.monotonic()
        self.create(system, name, num_nodes, gpus)
        result = self.clock.wait(lambda: self.milestones(system, name, num_nodes, t0), timeout,
                                 f"{system} {name} to start")
        time.sleep(2.0)  # trailing status writes and Events belong to the run
        window = (wall0 - 0.05, time.time())
        self.delete(system, name)
        self.wait_pods_gone(system, timeout)
        return result, window

    def wait_pods_gone(self, system: str, timeout: float) -> None:
        """Asked of the apiserver, not the watch: a re-opened watch does not replay deletions."""
        deadline = time.monotonic() + timeout
        while json.loads(self.core.list_namespaced_pod(self.ns[system], limit=1, _preload_content=False).data)["items"]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{system} pods still there after {timeout}s")
            time.sleep(0.2)

    def stop(self) -> None:
        for w in self.watches:
            w.stop()
        for p in (self.operator, self.jobset):
            if p is not None:
                p.stop()
        self.cluster.stop()
        shutil.rmtree(self.cluster.dir, ignore_errors=True)


def median_table(runs: list[dict]) -> dict:
    return {m: statistics.median(r[m] for r in runs) for m in MILESTONES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per pod (8 = one pod per 8-GPU node)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    # SIGTERM (timeout, kill) unwinds through `finally`, which stops the operator and the cluster.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` prints where a stuck run waits
    h = Harness(max(args.sizes))
    results = []
    try:
        h.start()
        for n in args.sizes:
            runs: dict[str, list[dict]] = {"ours": [], "jobset": []}
            windows: dict[str, list[tuple[float, float]]] = {"ours": [], "jobset": []}
            for i in range(args.runs):
                order = ("ours", "jobset") if i % 2 == 0 else ("jobset", "ours")
                for system in order:
                    r, w = h.run_once(system, f"s{n}-r{i}", n, args.gpus, args.timeout)
                    runs[system].append(r)
                    windows[system].append(w)
                    print(f"  {n:>5} nodes run {i} {system:>6}: " +
                          " ".join(f"{m} {r[m]:.2f}s" for m in MILESTONES), flush=True)
            results.append({"nodes": n, "runs": runs, "windows": windows})
        time.sleep(2.0)  # the audit log is written in batches (1 s)
        for res in results:
            n = res["nodes"]
            res["median_s"] = {s: median_table(res["runs"][s]) for s in ("ours", "jobset")}
            res["ratio_ours_to_jobset"] = {m: res["median_s"]["ours"][m] / res["median_s"]["jobset"][m]
                                           for m in MILESTONES}
            res["api"] = {}
            for s in ("ours", "jobset"):
                per_run = audit_counts(h.cluster.audit_log_path, h.users(s), res["windows"][s])
                summaries = [summarize_counts(c, n) for c in per_run]
                total = sum(per_run, Counter())
                res["api"][s] = {"per_run": summaries,
                                 "median_writes_per_pod": statistics.median(x["writes_per_pod"] for x in summaries),
                                 "median_reads_per_pod": statistics.median(x["reads_per_pod"] for x in summaries),
                                 "all_runs": summarize_counts(total, n * len(per_run))}
            del res["windows"]
        operator_rss = rss_peak_mb(h.operator.proc.pid)
    finally:
        h.stop()

    print()
    print(f"{'nodes':>6} {'milestone':>10} {'ours (median)':>14} {'JobSet (median)':>16} {'ours/JobSet':>12}")
    for res in results:
        for m in MILESTONES:
            print(f"{res['nodes']:>6} {m:>10} {res['median_s']['ours'][m]:>13.2f}s "
                  f"{res['median_s']['jobset'][m]:>15.2f}s {res['ratio_ours_to_jobset'][m]:>12.2f}")
    print()
    print(f"{'nodes':>6} {'system':>7} {'writes/pod':>11} {'reads/pod':>10}")
    for res in results:
        for s in ("ours", "jobset"):
            a = res["api"][s]
            print(f"{res['nodes']:>6} {s:>7} {a['median_writes_per_pod']:>11.2f} {a['median_reads_per_pod']:>10.2f}")
    from localcluster.binaries import read_versions

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "machine": machine(), "versions": read_versions(), "runs_per_system": args.runs, "gpus_per_pod": args.gpus,
        "operator_peak_rss_mb": operator_rss, "results": results}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
