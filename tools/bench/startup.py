"""Benchmark: start latency of one N-node job, ours (TrainingJob) against JobSet and Kubeflow Training
Operator v1 (PyTorchJob), and the API cost per pod.

    .venv/bin/python -P tools/bench/startup.py [--sizes 16 128 1000] [--runs 5] [--systems ours jobset kubeflow]

Starts a local cluster of its own with max(sizes) fake 8-GPU nodes (kwok; pods start at once) and an
apiserver audit log, installs the CRDs and runs the multinode operator and the peers side by side, each
under its own ServiceAccount. For every size it rotates runs of the systems (who goes first rotates
too), `--runs` each, one job at a time, every job asking for `--gpus` GPUs per pod (8: one pod per
node). From raw watches in this process it measures, from the create request:
  created    all N pods exist
  scheduled  all N pods have a node
  running    all N pods are Running
  status     the job says so (TrainingJob phase Running; JobSet: every replicated Job ready; PyTorchJob:
             condition Running, which Kubeflow sets once the master pod runs)
(and, per run in the JSON, first_created: the first pod exists, the controller's latency before its creates)
and, from the audit log, the controllers' requests during each run (apply → status + 2 s): ours is the
operator's identity; JobSet's is its controller plus kube-controller-manager's Job controller, which
creates its pods; Kubeflow's is its operator. And the CPU a start costs (see cpu_cost): user + system
seconds of the operator's process, of JobSet's controller process and of kube-controller-manager, read
from /proc/<pid>/stat just before the create request and when the job says it runs. Prints medians and
ratios ours/peer, writes .cache/bench/startup.json. `make bench` runs it; tests/bench runs a
4-node smoke of it.
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
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import (
    BENCH_NODE_MONITOR_GRACE, JOB_CONTROLLER_USER, JOBSET_GROUP, JOBSET_NAME_LABEL, JOBSET_PLURAL, JOBSET_RESTART_LABEL,
    JOBSET_VERSION, Clock, JobSetProcess, RawWatch, audit_counts, cluster_pids, cpu_seconds, identity,
    install_jobset_crds, jobset_manifest, jobset_running, machine, rss_peak_mb, summarize_counts, terminated_watchers,
    trainingjob_running, wait_established,
)
import kubeflow
from multinode.testing import training_job
from localcluster.harness.kube import kubectl, new_namespace
from localcluster.harness.operator import CRD_FILE, OperatorProcess

from multinode.api import GROUP, LABEL_ATTEMPT, LABEL_JOB_NAME, PLURAL, VERSION

OUT = REPO / ".cache" / "bench" / "startup.json"
MILESTONES = ("created", "scheduled", "running", "status")
# kube-controller-manager's own CPU while no job starts, measured over this long once the cluster is up: the
# part of its CPU during a run that the run's length, not the run, accounts for (cpu_cost).
KCM_IDLE_SAMPLE_SECONDS = 5.0


SYSTEMS = ("ours", "jobset", "kubeflow")
LABELS = {"ours": "multinode", "jobset": "JobSet", "kubeflow": "Kubeflow v1"}


class Harness:
    """A cluster with the systems under test running, one namespace each, and watches feeding one Clock."""

    def __init__(self, max_nodes: int, name: str | None = None, gpus_per_node: int = 8, by_attempt: bool = False,
                 systems: tuple[str, ...] = ("ours", "jobset"), profile_to: Path | None = None,
                 gang_scheduling: bool = True, audit_log: bool = True):
        # by_attempt: pods are keyed (system, job, attempt) instead of (system, job), for restart trials.
        self.by_attempt = by_attempt
        self.profile_to = profile_to
        self.systems = systems
        self.cluster = LocalCluster(ClusterConfig(
            name=name or f"bench-{uuid.uuid4().hex[:6]}", die_with_parent=True, audit_log=audit_log,
            gang_scheduling=gang_scheduling,
            node_monitor_grace_period=BENCH_NODE_MONITOR_GRACE,
            ready_timeout_seconds=max(120.0, max_nodes * 0.3),
            nodes=NodePoolConfig(count=max_nodes, gpus_per_node=gpus_per_node, rdma_per_node=0)))
        self.clock = Clock()
        self.watches: list[RawWatch] = []
        self.operator: OperatorProcess | None = None
        self.jobset: JobSetProcess | None = None
        self.kubeflow = None
        self.user: dict[str, str] = {}
        self.cluster_pids: dict[str, int] = {}
        self.kcm_idle_cpu_per_s = 0.0

    def start(self) -> None:
        c = self.cluster
        c.start()
        self.cluster_pids = cluster_pids(c)
        kc = str(c.kubeconfig)
        self.api = c.api_client()
        self.core, self.custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        rbac = client.RbacAuthorizationV1Api(self.api)
        kubectl(kc, "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        wait_established(kc, "trainingjobs.multinode.dev")
        self.ns = {s: new_namespace(self.core, prefix=s) for s in self.systems}
        op_kc, self.user["ours"] = identity(c, self.core, rbac, "multinode-operator")
        self.operator = OperatorProcess(op_kc, [self.ns["ours"]], c.dir / "logs" / "operator.log",
                                        profile_to=self.profile_to)
        self.operator.start()
        if "jobset" in self.systems:
            install_jobset_crds(kc)
            js_kc, self.user["jobset"] = identity(c, self.core, rbac, "jobset-controller")
            self.jobset = JobSetProcess(js_kc, c.dir)
            self.jobset.start()
        if "kubeflow" in self.systems:
            kubeflow.install_training_operator_crds(kc)
            kf_kc, self.user["kubeflow"] = identity(c, self.core, rbac, "training-operator")
            self.kubeflow = kubeflow.TrainingOperatorProcess(kf_kc, c.dir)
            self.kubeflow.start()

        def keyed(system, label, attempt_label):
            def job_of(pod):
                labels = pod["metadata"].get("labels", {})
                key = (system, labels.get(label))
                if key[1] is None:
                    return None
                return (*key, int(labels.get(attempt_label, -1))) if self.by_attempt else key
            return job_of

        pod_keys = {"ours": keyed("ours", LABEL_JOB_NAME, LABEL_ATTEMPT),
                    "jobset": keyed("jobset", JOBSET_NAME_LABEL, JOBSET_RESTART_LABEL),
                    "kubeflow": keyed("kubeflow", kubeflow.KUBEFLOW_JOB_NAME_LABEL, "-")}
        job_paths = {"ours": (f"/apis/{GROUP}/{VERSION}", PLURAL, trainingjob_running),
                     "jobset": (f"/apis/{JOBSET_GROUP}/{JOBSET_VERSION}", JOBSET_PLURAL, jobset_running),
                     "kubeflow": (f"/apis/{kubeflow.KUBEFLOW_GROUP}/{kubeflow.KUBEFLOW_VERSION}",
                                  kubeflow.PYTORCHJOB_PLURAL, kubeflow.pytorchjob_running)}
        for system in self.systems:
            ns, job_of = self.ns[system], pod_keys[system]
            prefix, plural, running = job_paths[system]
            self.watches += [
                RawWatch(self.api, f"/api/v1/namespaces/{ns}/pods",
                         lambda k, o, t, job_of=job_of: self.clock.pod_event(k, o, t, job_of)).start(),
                RawWatch(self.api, f"{prefix}/namespaces/{ns}/{plural}",
                         lambda k, o, t, system=system, running=running:
                         self.clock.job_event((system, o["metadata"]["name"]), running(o), t)).start(),
            ]

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far (user + system, every thread) by the processes a start costs: the operator,
        JobSet's controller, and every process of the cluster's own (kube-apiserver, etcd, the scheduler, kwok,
        kube-controller-manager, whose Job controller creates JobSet's pods), each by its name."""
        pids = {name: controller.proc.pid for name, controller in (("operator", self.operator), ("jobset", self.jobset))
                if controller is not None and controller.proc is not None and controller.proc.poll() is None}
        pids |= self.cluster_pids  # kube-controller-manager among them
        return {name: cpu_seconds(pid) for name, pid in pids.items()}

    def run_alone(self, system: str) -> None:
        """Only `system`'s controller running. An idle peer is not free: JobSet's controller watches every pod
        in the cluster, so it would bill the system measured for the peer's own watch (0.5-0.7 CPU s a
        100-job burst of ours), while ours, watching only its namespaces, costs the peers nothing."""
        for name, controller in (("ours", self.operator), ("jobset", self.jobset), ("kubeflow", self.kubeflow)):
            if controller is None:
                continue
            if name != system:
                controller.stop()
            elif controller.proc is None or controller.proc.poll() is not None:
                controller.start()

    @property
    def kcm_pid(self) -> int:
        return self.cluster_pids["kube-controller-manager"]

    def measure_kcm_idle(self, seconds: float = KCM_IDLE_SAMPLE_SECONDS) -> None:
        """kube-controller-manager's CPU per second with no job starting (its node, lease and endpoint loops)."""
        before, t0 = cpu_seconds(self.kcm_pid), time.monotonic()
        time.sleep(seconds)
        self.kcm_idle_cpu_per_s = (cpu_seconds(self.kcm_pid) - before) / (time.monotonic() - t0)

    @property
    def op_user(self) -> str:
        return self.user["ours"]

    def users(self, system: str) -> set[str]:
        # JobSet's pods are created by kube-controller-manager's Job controller: its requests count too.
        return {self.user[system], JOB_CONTROLLER_USER} if system == "jobset" else {self.user[system]}

    def _crd(self, system: str) -> tuple[str, str, str]:
        return {"ours": (GROUP, VERSION, PLURAL), "jobset": (JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL),
                "kubeflow": (kubeflow.KUBEFLOW_GROUP, kubeflow.KUBEFLOW_VERSION, kubeflow.PYTORCHJOB_PLURAL)}[system]

    def create(self, system: str, name: str, num_nodes: int, gpus: int, **spec) -> None:
        if system == "ours":
            body = training_job(name, num_nodes, gpus=gpus, **spec)
            # Like the peers' pods, not ganged: the native gang's own cost is tools/bench/gang.py's figure.
            body["spec"].setdefault("scheduling", {"nativePodGroup": False})
            # BlockingRecreate: kwok runs no containers, so no gang restarts in place here (the default where
            # nodes declare the feature, as these do); the recreate path is the one the peers' is compared with.
            body["spec"].setdefault("failurePolicy",
                                    {"maxRestarts": 1000, "backoff": {"initialSeconds": 0, "maxSeconds": 0},
                                     "restartStrategy": "BlockingRecreate"})
        elif system == "jobset":
            body = jobset_manifest(name, num_nodes, gpus)
        else:
            body = kubeflow.pytorchjob_manifest(name, num_nodes, gpus)
        group, version, plural = self._crd(system)
        self.custom.create_namespaced_custom_object(group, version, self.ns[system], plural, body)

    def delete(self, system: str, name: str) -> None:
        group, version, plural = self._crd(system)
        self.custom.delete_namespaced_custom_object(group, version, self.ns[system], plural, name,
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
            if m == "created":  # how long before the first pod: the controller's own latency, apart from throughput
                out["first_created"] = min(times) - t0
        st = self.clock.status.get(key, {}).get("running")
        if st is None:
            return None
        out["status"] = st - t0
        return out

    def run_once(self, system: str, name: str, num_nodes: int, gpus: int,
                 timeout: float) -> tuple[dict, tuple[float, float]]:
        dropped0 = terminated_watchers(self.api)
        cpu0 = self.cpu()
        wall0, t0 = time.time(), time.monotonic()
        self.create(system, name, num_nodes, gpus)
        result = self.clock.wait(lambda: self.milestones(system, name, num_nodes, t0), timeout,
                                 f"{system} {name} to start")
        cpu1 = self.cpu()
        # From just before the create request to the job saying it runs (every pod Running, and the
        # controller's status write that says so): what one start cost each process.
        result["cpu_s"] = {proc: cpu1[proc] - cpu0[proc] for proc in cpu0}
        result["cpu_window_s"] = time.monotonic() - t0
        # Pod watchers kube-apiserver closed for falling behind the start (each of those controllers lists again).
        result["terminated_pod_watchers"] = terminated_watchers(self.api) - dropped0
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
        for p in (self.operator, self.jobset, self.kubeflow):
            if p is not None:
                p.stop()
        self.cluster.stop()
        shutil.rmtree(self.cluster.dir, ignore_errors=True)


def median_table(runs: list[dict]) -> dict:
    return {m: statistics.median(r[m] for r in runs) for m in MILESTONES}


def peers_of(systems) -> list[str]:
    return [s for s in systems if s != "ours"]


def cpu_cost(runs: dict[str, list[dict]], pods: int, kcm_idle_per_s: float) -> dict:
    """CPU seconds per 1000 pods started (create request → job Running), medians over the runs.

    ours: the operator's process. jobset: JobSet's controller process plus the Job controller's share of
    kube-controller-manager, which runs in that process beside other controllers. The share is, per round
    of runs, kube-controller-manager's CPU during the JobSet run minus during ours: ours creates no Job, and
    its other work (the endpoints of the headless Service, the pods' garbage collection) is alike for both.
    From each, its idle CPU per second (measured once, before the first run) times the run's length is
    taken first, so that the slower run's longer window is not counted as Job controller work."""
    per_1000 = 1000 / pods
    ours = [r["cpu_s"]["operator"] * per_1000 for r in runs["ours"]]
    out: dict = {"ours": statistics.median(ours), "ours_runs": ours}
    if "jobset" in runs:
        def kcm_busy(r: dict) -> float:
            return r["cpu_s"]["kube-controller-manager"] - kcm_idle_per_s * r["cpu_window_s"]
        controller, job_controller = [], []
        for js, own in zip(runs["jobset"], runs["ours"], strict=True):
            controller.append(js["cpu_s"]["jobset"] * per_1000)
            job_controller.append((kcm_busy(js) - kcm_busy(own)) * per_1000)
        jobset = [a + b for a, b in zip(controller, job_controller, strict=True)]
        out.update(jobset=statistics.median(jobset), jobset_runs=jobset,
                   jobset_controller=statistics.median(controller), job_controller=statistics.median(job_controller),
                   ratio_ours_to_jobset=out["ours"] / statistics.median(jobset))
    return out


def summarize(results: list[dict], audit_log: Path, users, kcm_idle_per_s: float) -> None:
    """Medians, ratios ours/peer, CPU per 1000 pods, and API cost from the audit log, added to each size's
    result."""
    for res in results:
        n, systems = res["nodes"], list(res["runs"])
        res["cpu_per_1000_pods"] = cpu_cost(res["runs"], n, kcm_idle_per_s)
        res["median_s"] = {s: median_table(res["runs"][s]) for s in systems}
        res["ratio_ours_to"] = {p: {m: res["median_s"]["ours"][m] / res["median_s"][p][m] for m in MILESTONES}
                                for p in peers_of(systems)}
        res["api"] = {}
        for s in systems:
            per_run = audit_counts(audit_log, users(s), res["windows"][s])
            summaries = [summarize_counts(c, n) for c in per_run]
            total = sum(per_run, Counter())
            res["api"][s] = {"per_run": summaries,
                             "median_writes_per_pod": statistics.median(x["writes_per_pod"] for x in summaries),
                             "median_reads_per_pod": statistics.median(x["reads_per_pod"] for x in summaries),
                             "all_runs": summarize_counts(total, n * len(per_run))}
        del res["windows"]


def print_tables(results: list[dict]) -> None:
    for res in results:
        systems = list(res["runs"])
        print(f"\n{res['nodes']} nodes, medians (s):  " + "  ".join(f"{LABELS[s]:>12}" for s in systems)
              + "  " + "  ".join(f"{'ours/' + LABELS[p]:>18}" for p in peers_of(systems)))
        for m in MILESTONES:
            print(f"{m:>24}:  " + "  ".join(f"{res['median_s'][s][m]:>12.2f}" for s in systems)
                  + "  " + "  ".join(f"{res['ratio_ours_to'][p][m]:>18.2f}" for p in peers_of(systems)))
        print(f"{'writes/pod':>24}:  " + "  ".join(f"{res['api'][s]['median_writes_per_pod']:>12.2f}" for s in systems))
        print(f"{'reads/pod':>24}:  " + "  ".join(f"{res['api'][s]['median_reads_per_pod']:>12.2f}" for s in systems))
        cpu = res["cpu_per_1000_pods"]
        print(f"{'CPU s per 1000 pods':>24}:  {cpu['ours']:>12.2f}" + (
            f"  {cpu['jobset']:>12.2f}  (JobSet's controller {cpu['jobset_controller']:.2f} + Job controller "
            f"{cpu['job_controller']:.2f}; ours/JobSet {cpu['ratio_ours_to_jobset']:.2f})" if "jobset" in cpu else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 128, 1000])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        help="ours is always measured; the others are the peers")
    parser.add_argument("--runs-at-1000-for-kubeflow", type=int, default=None, dest="kubeflow_large_runs",
                        help="fewer Kubeflow runs at sizes >= 1000 (it creates 20 objects/s)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per pod (8 = one pod per 8-GPU node)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--profile-operator", type=Path, default=None, metavar="PSTATS",
                        help="run the operator under cProfile (main thread: kopf's event loop) and write its "
                             "stats here; slows the operator, so not for the figures")
    args = parser.parse_args(argv)
    systems = ("ours", *[s for s in args.systems if s != "ours"])
    # SIGTERM (timeout, kill) unwinds through `finally`, which stops the operator and the cluster.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` prints where a stuck run waits
    h = Harness(max(args.sizes), systems=systems, profile_to=args.profile_operator)
    results = []
    try:
        h.start()
        h.measure_kcm_idle()
        for n in args.sizes:
            runs: dict[str, list[dict]] = {s: [] for s in systems}
            windows: dict[str, list[tuple[float, float]]] = {s: [] for s in systems}
            for i in range(args.runs):
                # Who goes first rotates, so no system always runs on a cluster the other just churned.
                order = systems[i % len(systems):] + systems[:i % len(systems)]
                for system in order:
                    if (system == "kubeflow" and n >= 1000 and args.kubeflow_large_runs is not None
                            and len(runs[system]) >= args.kubeflow_large_runs):
                        continue
                    r, w = h.run_once(system, f"s{n}-r{i}", n, args.gpus, args.timeout)
                    runs[system].append(r)
                    windows[system].append(w)
                    print(f"  {n:>5} nodes run {i} {system:>8}: " +
                          " ".join(f"{m} {r[m]:.2f}s" for m in MILESTONES)
                          + f" pod watchers dropped {r['terminated_pod_watchers']:.0f}", flush=True)
            results.append({"nodes": n, "runs": runs, "windows": windows})
        time.sleep(2.0)  # the audit log is written in batches (1 s)
        summarize(results, h.cluster.audit_log_path, h.users, h.kcm_idle_cpu_per_s)
        operator_rss = rss_peak_mb(h.operator.proc.pid)
    finally:
        h.stop()

    print_tables(results)
    from localcluster.binaries import read_versions

    args.out.parent.mkdir(parents=True, exist_ok=True)
    largest = results[-1]["cpu_per_1000_pods"]
    args.out.write_text(json.dumps({
        "machine": machine(), "versions": read_versions(), "runs_per_system": args.runs, "gpus_per_pod": args.gpus,
        "systems": list(systems), "operator_peak_rss_mb": operator_rss,
        # CPU seconds per 1000 pods started, at the largest size (each size's detail: results[].cpu_per_1000_pods).
        "cpu": {s: largest[s] for s in ("ours", "jobset") if s in largest},
        "kcm_idle_cpu_per_s": h.kcm_idle_cpu_per_s, "results": results}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
