"""Benchmark: a node's kubelet dies → the replacement gang is created, ours against JobSet, on one cluster
with stock node timings (node-monitor-grace-period 40 s, default not-ready/unreachable tolerations 300 s).

    .venv/bin/python -P tools/bench/node_loss.py [--trials 5] [--timings stock]

A realistic dead kubelet on kwok: the cluster's kwok manages only nodes annotated kwok.x-k8s.io/node=fake;
this script starts a SECOND kwok (same binary, same stage files, same lease duration) that manages only
the "doomed" nodes (annotation kwok.x-k8s.io/node=doomed) and their pods. SIGKILLing that process stops
every heartbeat of those nodes at once: no Node status update, no Lease renewal, so the node lifecycle
controller marks them Ready=Unknown after the grace period and taints them, as with a dead machine.
Watches on Nodes and Leases check that (`heartbeats_after_kill` must be 0) and time Ready → Unknown.

Trials run concurrently: per side `--trials` 2-node jobs (ours: TrainingJob, backoff 0; JobSet:
maxRestarts 1000), each pinned by nodeSelector to a group of its own: a doomed node and a surviving node
(8 GPUs each, so one pod per node), plus a spare node added once every gang runs, for the replacement.
All doomed nodes die at the same instant. Each trial is measured from the kill to "the replacement gang
created": every pod of the next attempt exists (ours: pods labelled attempt 1; JobSet: pods of
restart-attempt 1, created by the Job controller for the recreated Job). Prints a table, writes
.cache/bench/node_loss.json; tools/bench/report.py puts it into docs/benchmarks.md/json. `make bench` runs
it; tests/bench runs a 1-trial smoke of it on short timings.

A JobSet trial that makes no gang in time is recorded with what it waits on (`jobset_blocked`): its pods
(deletionTimestamp, phase, conditions, finalizers, node and that node's Ready and taints), its child Jobs'
status (active/failed/terminating, conditions, podReplacementPolicy) and the Job controller's own log line.
What every run saw: the evicted pod stays Terminating (no kubelet ever confirms the deletion), so the Job
stays FailureTarget with status.terminating=1 and never gets Failed, the only condition JobSet restarts on.

`--admin-action out-of-service|delete-node` applies a documented admin action to every dead node the moment
it is seen Ready=Unknown, for both sides (written to node_loss_admin.json); `--after-timeout ACTION`
applies it to the timed-out JobSet trials' nodes afterwards and times action → replacement gang.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from kubernetes import client
from localcluster import ClusterConfig, LocalCluster, NodePoolConfig, binaries, netplan, processes
from localcluster.cluster import KWOK_STAGE_FILES, STAGES_DIR
from localcluster.nodes import KWOK_ANNOTATION, render_fake_gpu_node

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import (JOBSET_GROUP, JOBSET_NAME_LABEL, JOBSET_PLURAL, JOBSET_RESTART_LABEL, JOBSET_VERSION,
                   RawWatch, free_port, jobset_manifest, machine)
from startup import Harness

OUT = REPO / ".cache" / "bench" / "node_loss.json"
OUT_ADMIN = REPO / ".cache" / "bench" / "node_loss_admin.json"
# The Job controller's "Delaying marking the Job as finished" and PodGC's and the taint-eviction controller's
# decisions are logged at V(4): kube-controller-manager.log of the cluster then shows why a Job waits.
KCM_VMODULE = "--vmodule=job_controller=4,gc_controller=4,taint_eviction=4"
GROUP_LABEL = "bench.multinode.dev/group"
DOOMED = "doomed"
SYSTEMS = ("ours", "jobset")


def _wall(value: str | None) -> float | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


class NodeWatch:
    """Per doomed node: heartbeats (Ready's lastHeartbeatTime, Lease renewTime; wall clock) and when its
    Ready condition was first seen Unknown (monotonic)."""

    def __init__(self, api, doomed: set[str]):
        self.doomed = doomed
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # notified when a doomed node is first seen Unknown
        self.heartbeats: dict[str, set[float]] = {n: set() for n in doomed}
        self.renewals: dict[str, set[float]] = {n: set() for n in doomed}
        self.unknown_at: dict[str, float] = {}
        self.watches = [RawWatch(api, "/api/v1/nodes", self._node).start(),
                        RawWatch(api, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                                 self._lease).start()]

    def _node(self, kind: str, node: dict, now: float) -> None:
        name = node["metadata"]["name"]
        if name not in self.doomed:
            return
        ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None)
        if ready is None:
            return
        with self.lock:
            beat = _wall(ready.get("lastHeartbeatTime"))
            if beat is not None:
                self.heartbeats[name].add(beat)
            if ready.get("status") == "Unknown" and name not in self.unknown_at:
                self.unknown_at[name] = now
                self.changed.notify_all()

    def _lease(self, kind: str, lease: dict, now: float) -> None:
        name = lease["metadata"]["name"]
        if name in self.doomed:
            renew = _wall((lease.get("spec") or {}).get("renewTime"))
            if renew is not None:
                with self.lock:
                    self.renewals[name].add(renew)

    def after(self, wall_kill: float) -> dict:
        """Heartbeats stamped after the kill (a second of slack: status timestamps are whole seconds)."""
        with self.lock:
            return {"node_status": sum(1 for v in self.heartbeats.values() for t in v if t > wall_kill + 1.0),
                    "lease": sum(1 for v in self.renewals.values() for t in v if t > wall_kill + 0.5)}

    def stop(self) -> None:
        for w in self.watches:
            w.stop()


class DoomedKwok:
    """A second kwok process for the doomed nodes only; kill() is their kubelets dying at once."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.proc: subprocess.Popen | None = None
        self.marker = ""

    def start(self) -> None:
        bins = binaries.ensure_built()
        port = free_port()
        self.marker = f"--server-address=127.0.0.1:{port}"
        stage_files = [str(bins.kwok_stages / f) for f in KWOK_STAGE_FILES]
        stage_files += [str(p) for p in sorted(STAGES_DIR.glob("*.yaml"))]
        timings = self.cluster.config.node_timings()
        self.proc = processes.start([
            str(bins.kwok), f"--kubeconfig={self.cluster.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={DOOMED}",
            f"--cidr={netplan.KWOK_POD_RANGE}", "--node-ip=127.0.0.1",
            f"--node-lease-duration-seconds={timings.node_lease_duration_seconds}",
            self.marker, f"--config={','.join(stage_files)}",
        ], self.cluster.dir / "logs" / "kwok-doomed.log", die_with_parent=True)

    def kill(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, "the doomed nodes' kwok is not running"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            processes.stop(self.proc.pid, self.marker, grace_seconds=5)


# The documented admin actions for a node that is gone for good (kubernetes.io/docs "Non-graceful node
# shutdown handling", KEP-2268, kubernetes/enhancements#1116): either lets PodGC force-delete the pods stuck
# Terminating on it (pkg/controller/podgc/gc_controller.go: gcTerminating for the taint, gcOrphaned for a
# deleted Node).
OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
ADMIN_ACTIONS = ("none", "out-of-service", "delete-node")


def admin_act(h: Harness, node: str, action: str) -> None:
    """Apply one admin action to a dead node: the out-of-service taint, or deleting the Node object."""
    if action == "delete-node":
        h.core.delete_node(node)
        return
    assert action == "out-of-service", action
    while True:
        # The node lifecycle controller edits the same taint list: replace it under the read resourceVersion,
        # and read again on a conflict.
        obj = h.api.sanitize_for_serialization(h.core.read_node(node))
        taints = [t for t in (obj.get("spec") or {}).get("taints") or [] if t["key"] != OUT_OF_SERVICE["key"]]
        try:
            h.core.patch_node(node, {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                                     "spec": {"taints": [*taints, OUT_OF_SERVICE]}})
            return
        except client.ApiException as e:
            if e.status != 409:
                raise


class AdminOnUnknown(threading.Thread):
    """The admin of a stock cluster acting as soon as it could: each doomed node gets `action` the moment
    its Ready condition is first seen Unknown (no human reaction time counted)."""

    def __init__(self, h: Harness, watch: NodeWatch, action: str):
        super().__init__(daemon=True)
        self.h, self.watch, self.action = h, watch, action
        self.applied: dict[str, float] = {}  # node → monotonic time the action was done
        self.errors: list[str] = []
        self._stopping = False

    def run(self) -> None:
        pending = set(self.watch.doomed)
        while pending:
            with self.watch.changed:
                self.watch.changed.wait_for(lambda: self._stopping or bool(pending & set(self.watch.unknown_at)), 1.0)
                if self._stopping:
                    return
                due = sorted(pending & set(self.watch.unknown_at))
            for node in due:
                try:
                    admin_act(self.h, node, self.action)
                    self.applied[node] = time.monotonic()
                except Exception as e:  # noqa: BLE001 - recorded in the report, the bench goes on
                    self.errors.append(f"{node}: {e!r}")
                pending.discard(node)

    def stop(self) -> None:
        with self.watch.changed:
            self._stopping = True
            self.watch.changed.notify_all()


def _conditions(obj: dict) -> list[str]:
    return [f"{c['type']}={c['status']}" + (f" ({c['reason']})" if c.get("reason") else "")
            for c in (obj.get("status") or {}).get("conditions") or []]


def jobset_blocked_state(h: Harness, name: str, wall_kill: float) -> dict:
    """What a JobSet that made no replacement gang is waiting on: its pods (deletion, phase, conditions,
    finalizers, node and that node's state), its child Jobs' status and the JobSet's own status, plus a
    one-line summary. Times are seconds after the kill."""
    api, ns = h.api, h.ns["jobset"]
    sel = f"{JOBSET_NAME_LABEL}={name}"

    def after_kill(ts: str | None) -> float | None:
        t = _wall(ts)
        return round(t - wall_kill, 1) if t is not None else None

    nodes: dict[str, dict] = {}
    pods = []
    for pod in api.sanitize_for_serialization(h.core.list_namespaced_pod(ns, label_selector=sel))["items"]:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        node_name = spec.get("nodeName")
        if node_name and node_name not in nodes:
            try:
                n = api.sanitize_for_serialization(h.core.read_node(node_name))
                ready = next((c for c in (n.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"),
                             {})
                nodes[node_name] = {"exists": True, "ready": ready.get("status"),
                                    "taints": [f"{t['key']}:{t['effect']}" for t in
                                               (n.get("spec") or {}).get("taints") or []]}
            except client.ApiException as e:
                if e.status != 404:
                    raise
                nodes[node_name] = {"exists": False}
        deletion = meta.get("deletionTimestamp")
        grace = meta.get("deletionGracePeriodSeconds")
        # deletionTimestamp is the time of the DELETE plus the grace period.
        deleted_at = after_kill(deletion) - grace if deletion and grace is not None else after_kill(deletion)
        disruption = next((c for c in status.get("conditions") or [] if c["type"] == "DisruptionTarget"), None)
        pods.append({"name": meta["name"], "node": node_name, "phase": status.get("phase"),
                     "restart_attempt": (meta.get("labels") or {}).get(JOBSET_RESTART_LABEL),
                     "deletion_timestamp": deletion, "deletion_grace_period_seconds": grace,
                     "deleted_after_kill_s": deleted_at, "finalizers": meta.get("finalizers") or [],
                     "conditions": _conditions(pod),
                     "disruption_target": ({"reason": disruption.get("reason"), "message": disruption.get("message"),
                                            "after_kill_s": after_kill(disruption.get("lastTransitionTime"))}
                                           if disruption else None)})
    jobs = []
    batch = client.BatchV1Api(api)
    for job in api.sanitize_for_serialization(batch.list_namespaced_job(ns, label_selector=sel))["items"]:
        spec, status = job.get("spec") or {}, job.get("status") or {}
        jobs.append({"name": job["metadata"]["name"],
                     "restart_attempt": (job["metadata"].get("labels") or {}).get(JOBSET_RESTART_LABEL),
                     "pod_replacement_policy": spec.get("podReplacementPolicy"),
                     "pod_failure_policy": spec.get("podFailurePolicy"), "backoff_limit": spec.get("backoffLimit"),
                     "active": status.get("active", 0), "ready": status.get("ready", 0),
                     "failed": status.get("failed", 0), "terminating": status.get("terminating"),
                     "conditions": _conditions(job)})
    # The Job controller says why it does not mark the Job Failed (V(4), see KCM_VMODULE): its last word.
    log = h.cluster.dir / "logs" / "kube-controller-manager.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    for j in jobs:
        said = [ln for ln in lines if "Delaying marking the Job as finished" in ln and f"{ns}/{j['name']}" in ln]
        j["job_controller_log"] = said[-1][:400] if said else None
    js = api.sanitize_for_serialization(h.custom.get_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL, name))
    js_status = js.get("status") or {}
    jobset = {"restarts": js_status.get("restarts", 0), "terminal_state": js_status.get("terminalState"),
              "conditions": _conditions(js),
              "replicated_jobs": [{k: r.get(k, 0) for k in ("name", "active", "ready", "failed", "succeeded")}
                                  for r in js_status.get("replicatedJobsStatus") or []]}
    stuck = [p for p in pods if p["deletion_timestamp"] and p["phase"] not in ("Succeeded", "Failed")]
    parts = []
    for p in stuck:
        n = nodes.get(p["node"] or "", {})
        where = (f"Ready={n['ready']}, taints {', '.join(n['taints']) or 'none'}" if n.get("exists")
                 else "Node object gone")
        parts.append(f"pod {p['name']} Terminating (phase {p['phase']}) since {p['deleted_after_kill_s']} s after "
                     f"the kill on node {p['node']} ({where}; finalizers {', '.join(p['finalizers']) or 'none'})")
    for j in jobs:
        parts.append(f"Job {j['name']} status.terminating={j['terminating']} active={j['active']} "
                     f"failed={j['failed']}, podReplacementPolicy={j['pod_replacement_policy']}, "
                     f"conditions [{'; '.join(j['conditions'])}]"
                     + (" (job controller: \"Delaying marking the Job as finished, because there are still "
                        "terminating pod(s)\")" if j["job_controller_log"] else ""))
    parts.append(f"JobSet restarts={jobset['restarts']}")
    return {"summary": "; ".join(parts), "stuck_pods": len(stuck), "pods": pods, "nodes": nodes, "jobs": jobs,
            "jobset": jobset}


def add_node(h: Harness, name: str, group: str, doomed: bool) -> None:
    pool = NodePoolConfig(count=1, name_prefix=name, rdma_per_node=0, extra_labels={GROUP_LABEL: group})
    body = render_fake_gpu_node(pool, 0)
    body["metadata"]["name"] = body["metadata"]["labels"]["kubernetes.io/hostname"] = name
    if doomed:
        body["metadata"]["annotations"][KWOK_ANNOTATION] = DOOMED
    h.core.create_node(body)


def wait_ready(h: Harness, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        ready = {n.metadata.name for n in h.core.list_node().items
                 if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])}
        if set(names) <= ready:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not Ready: {sorted(set(names) - ready)}")
        time.sleep(0.25)


def create_job(h: Harness, system: str, name: str, group: str) -> None:
    selector = {GROUP_LABEL: group}
    if system == "ours":
        h.create(system, name, 2, 8, podTemplate={"nodeSelector": selector})
    else:
        body = jobset_manifest(name, 2, 8)
        body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = selector
        h.custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", h.ns[system], "jobsets", body)


def stats(values: list[float]) -> dict | None:
    return {"median": statistics.median(values), "worst": max(values), "n": len(values), "all": values} \
        if values else None


def run(h: Harness, trials: int, timeouts: dict[str, float], admin_action: str = "none",
        after_timeout: str = "none") -> dict:
    kwok = DoomedKwok(h.cluster)
    kwok.start()
    watch: NodeWatch | None = None
    admin: AdminOnUnknown | None = None
    try:
        groups = {(s, i): f"{s}-{i}" for s in SYSTEMS for i in range(trials)}
        doomed = {g: f"nl-{g}-doomed" for g in groups.values()}
        for g in groups.values():
            add_node(h, doomed[g], g, doomed=True)
            add_node(h, f"nl-{g}-keep", g, doomed=False)
        wait_ready(h, [n for g in groups.values() for n in (doomed[g], f"nl-{g}-keep")], 120)
        watch = NodeWatch(h.api, set(doomed.values()))
        for (s, i), g in groups.items():
            create_job(h, s, f"nl{i}", g)

        def gang(key, n=2):
            pods = h.clock.of(key)
            return pods if len(pods) >= n and all("running" in p for p in pods) else None

        def created(key, n=2):
            pods = h.clock.of(key)
            return pods if len(pods) >= n else None

        for (s, i) in groups:
            h.clock.wait(lambda s=s, i=i: gang((s, f"nl{i}", 0)), 120, f"{s} nl{i} running")
        # Every trial has exactly one pod on its doomed node (one 8-GPU pod per node, two nodes per group).
        for s in SYSTEMS:
            on = {p.spec.node_name for p in h.core.list_namespaced_pod(h.ns[s]).items}
            missing = [doomed[groups[(s, i)]] for i in range(trials) if doomed[groups[(s, i)]] not in on]
            assert not missing, f"{s}: no pod on {missing}"
        for g in groups.values():
            add_node(h, f"nl-{g}-spare", g, doomed=False)
        wait_ready(h, [f"nl-{g}-spare" for g in groups.values()], 60)

        if admin_action != "none":
            admin = AdminOnUnknown(h, watch, admin_action)
            admin.start()
        wall_kill, t_kill = time.time(), time.monotonic()
        kwok.kill()
        print(f"killed the doomed nodes' kwok (pid {kwok.proc.pid}) at {time.strftime('%H:%M:%S')}", flush=True)

        results: dict[str, list[float]] = {s: [] for s in SYSTEMS}
        missed: dict[str, int] = dict.fromkeys(SYSTEMS, 0)
        blocked: dict[str, dict] = {}
        for s in SYSTEMS:
            for i in range(trials):
                key = (s, f"nl{i}", 1)
                left = t_kill + timeouts[s] - time.monotonic()
                try:
                    pods = h.clock.wait(lambda key=key: created(key), max(left, 0.01), f"{s} nl{i} replacement gang")
                except TimeoutError:
                    missed[s] += 1
                    if s == "jobset":
                        # What it waits on, read the moment it timed out (docs/benchmarks.md, node loss).
                        blocked[f"nl{i}"] = jobset_blocked_state(h, f"nl{i}", wall_kill)
                        print(f"jobset nl{i}: no replacement gang {timeouts[s]:.0f} s after the kill: "
                              f"{blocked[f'nl{i}']['summary']}", flush=True)
                    continue
                results[s].append(max(sorted(p["created"] for p in pods)[:2]) - t_kill)
        if admin is not None:
            admin.stop()
        # Does the documented admin action end the wait? Applied now to the timed-out JobSet trials' nodes.
        unblocked: dict[str, float | None] = {}
        if after_timeout != "none" and blocked:
            t_act = time.monotonic()
            for trial in blocked:
                admin_act(h, doomed[groups[("jobset", int(trial[2:]))]], after_timeout)
            for trial in blocked:
                key = ("jobset", trial, 1)
                try:
                    pods = h.clock.wait(lambda key=key: created(key), max(t_act + 180 - time.monotonic(), 0.01),
                                        f"jobset {trial} replacement gang after {after_timeout}")
                    unblocked[trial] = max(sorted(p["created"] for p in pods)[:2]) - t_act
                except TimeoutError:
                    unblocked[trial] = None
                print(f"jobset {trial}: {after_timeout} applied {t_act - t_kill:.1f} s after the kill; replacement "
                      f"gang {unblocked[trial] if unblocked[trial] is None else round(unblocked[trial], 1)} s later",
                      flush=True)
        # Ready → Unknown of every doomed node (it has come by now on any run that reached a gang).
        try:
            h.clock.wait(lambda: len(watch.unknown_at) >= len(doomed), 30, "doomed nodes Ready=Unknown")
        except TimeoutError:
            pass
        not_ready = sorted(t - t_kill for t in watch.unknown_at.values())
        return {"trials_per_side": trials, "results": {s: stats(results[s]) for s in SYSTEMS},
                "timed_out": missed, "timeout_s": timeouts,
                "node_unknown_s": stats(not_ready), "doomed_nodes": len(doomed),
                "heartbeats_after_kill": watch.after(wall_kill),
                "admin_action": admin_action,
                "admin_action_after_kill_s": stats(sorted(t - t_kill for t in admin.applied.values()))
                if admin is not None else None,
                "admin_action_errors": admin.errors if admin is not None else [],
                # Per timed-out JobSet trial: what it was waiting on at the timeout.
                "jobset_blocked": blocked,
                "jobset_blocked_example": blocked[min(blocked)]["summary"] if blocked else None,
                "after_timeout_action": after_timeout if blocked else "none",
                "after_timeout_action_to_gang_s": unblocked}
    finally:
        if admin is not None:
            admin.stop()
        if watch is not None:
            watch.stop()
        kwok.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5, help="concurrent trials per side")
    parser.add_argument("--timings", default="stock", help="node timings preset (localcluster/timings.py)")
    parser.add_argument("--timeout-ours", type=float, default=180)
    parser.add_argument("--timeout-jobset", type=float, default=420)
    parser.add_argument("--admin-action", choices=ADMIN_ACTIONS, default="none",
                        help="documented admin action applied to each dead node the moment it is seen "
                             "Ready=Unknown, for both sides: the out-of-service taint or deleting the Node")
    parser.add_argument("--after-timeout", choices=ADMIN_ACTIONS, default="none",
                        help="admin action applied to the nodes of the JobSet trials that timed out, then the "
                             "time from it to their replacement gang (does it end the wait?)")
    parser.add_argument("--keep-logs", type=Path, help="copy the cluster's logs (controller-manager, JobSet, "
                        "kwok) here before it is removed")
    parser.add_argument("--out", type=Path, help=f"default {OUT} ({OUT_ADMIN} with an --admin-action)")
    args = parser.parse_args()
    args.out = args.out or (OUT if args.admin_action == "none" else OUT_ADMIN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    h = Harness(0, systems=SYSTEMS, by_attempt=True)
    # The harness' cluster, but with the chosen node timings (not the start benchmarks' 600 s grace).
    h.cluster = LocalCluster(ClusterConfig(name=h.cluster.config.name, die_with_parent=True, timings=args.timings,
                                           nodes=NodePoolConfig(count=0), controller_manager_args=(KCM_VMODULE,)))
    timings = h.cluster.config.node_timings()
    try:
        h.start()
        print(f"cluster logs: {h.cluster.dir / 'logs'}", flush=True)
        r = run(h, args.trials, {"ours": args.timeout_ours, "jobset": args.timeout_jobset}, args.admin_action,
                args.after_timeout)
    finally:
        if args.keep_logs:
            shutil.copytree(h.cluster.dir / "logs", args.keep_logs, dirs_exist_ok=True)
        h.stop()
    ours, js = r["results"]["ours"], r["results"]["jobset"]
    r["ratio_jobset_to_ours"] = js["median"] / ours["median"] if ours and js else None
    nan = {"median": float("nan"), "worst": float("nan"), "n": 0}
    print()
    print(f"{'system':>7} {'n':>3} {'kill → gang median':>19} {'worst':>8}")
    for s in SYSTEMS:
        v = r["results"][s] or nan
        print(f"{s:>7} {v['n']:>3} {v['median']:>18.1f}s {v['worst']:>7.1f}s   timed out: {r['timed_out'][s]}")
    u = r["node_unknown_s"] or nan
    print(f"node Ready → Unknown after the kill: median {u['median']:.1f}s, worst {u['worst']:.1f}s; "
          f"heartbeats after the kill: {r['heartbeats_after_kill']}")
    if r["admin_action"] != "none":
        a = r["admin_action_after_kill_s"] or nan
        print(f"admin action {r['admin_action']} on every dead node, median {a['median']:.1f}s after the kill; "
              f"errors: {r['admin_action_errors'] or 'none'}")
    if r["jobset_blocked_example"]:
        print(f"jobset blocked on (first timed-out trial): {r['jobset_blocked_example']}")
    for trial, after in r["after_timeout_action_to_gang_s"].items():
        print(f"jobset {trial}: {r['after_timeout_action']} after the timeout → replacement gang: "
              + (f"{after:.1f}s" if after is not None else "none within 180 s"))
    from localcluster.binaries import read_versions

    command = "MULTINODE_CACHE_DIR=... .venv/bin/python -P tools/bench/node_loss.py " + " ".join(sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine(), "versions": read_versions(), "timings": asdict(timings),
                                    "timings_preset": args.timings, "command": command.strip(), **r}, indent=2))
    print(f"wrote {args.out}")
    # A side that made no gang in time is reported (timed_out, with what it waits on: jobset_blocked), not an
    # error of the bench: on a dead node JobSet's pod stays Terminating and its Job never turns Failed
    # (docs/benchmarks.md, node loss).
    ok = ours is not None and r["heartbeats_after_kill"] == {"node_status": 0, "lease": 0}
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
