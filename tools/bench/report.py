"""Gather the benchmarks' JSON into docs/benchmarks.json and the generated tables of docs/benchmarks.md.

    .venv/bin/python -P tools/bench/report.py [--from .cache/bench] [--docs docs]

`make bench` runs it last. Each table of docs/benchmarks.md sits between `<!-- bench:<name> -->` and
`<!-- /bench:<name> -->`; only those parts are rewritten, the prose around them is not. A benchmark
whose JSON is missing leaves its table as it was.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LABELS = {"ours": "multinode", "jobset": "JobSet", "kubeflow": "Kubeflow v1"}
MILESTONES = {"created": "all pods created", "scheduled": "all scheduled", "running": "all Running",
              "status": "job status Running"}
SOURCES = ("startup", "floor", "load", "recovery_peers", "recovery", "node_loss", "node_loss_admin", "gang", "mirror",
           "mirror_chaos", "failover", "huge", "plan_scale", "restart", "drain", "in_place", "spare", "elastic")


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header: list[str], rows: list[list], align: str) -> str:
    return "\n".join([_row(header), _row(align.split()), *(_row(r) for r in rows)])


def startup_table(data: dict) -> str:
    systems = data["systems"]
    peers = [s for s in systems if s != "ours"]
    header = ["nodes", "milestone", *(LABELS[s] for s in systems), *(f"ours/{LABELS[p]}" for p in peers)]
    rows = []
    for res in data["results"]:
        for m, label in MILESTONES.items():
            rows.append([res["nodes"], label, *(f"{res['median_s'][s][m]:.2f}" for s in systems),
                         *(f"{res['ratio_ours_to'][p][m]:.2f}" for p in peers)])
    runs = {s: len(data["results"][-1]["runs"][s]) for s in systems}
    note = (f"Medians of {data['runs_per_system']} runs per system and size, seconds from the create request"
            + (f" (at {data['results'][-1]['nodes']} nodes: " + ", ".join(f"{LABELS[s]} {n}" for s, n in runs.items())
               + " runs)" if len(set(runs.values())) > 1 else "")
            + f"; {data['machine']}; operator peak RSS over the session {data['operator_peak_rss_mb']:.0f} MB."
            + _cpu_note(data))
    return _table(header, rows, "---: --- " + "---: " * (len(systems) + len(peers))) + "\n\n" + note


def _cpu_note(data: dict) -> str:
    """CPU seconds per 1000 pods started at the largest size (startup.py's cpu_cost), when measured."""
    res = data["results"][-1]
    cpu = res.get("cpu_per_1000_pods")
    if not cpu:
        return ""
    note = (f" CPU seconds per 1000 pods started ({res['nodes']} nodes, create request → job Running, medians): "
            f"operator **{cpu['ours']:.2f}** ({cpu['ours']:.2f} ms per pod)")
    if "jobset" in cpu:
        note += (f", JobSet **{cpu['jobset']:.2f}** (its controller {cpu['jobset_controller']:.2f} + the Job "
                 f"controller's share of kube-controller-manager {cpu['job_controller']:.2f}); ours/JobSet "
                 f"**{cpu['ratio_ours_to_jobset']:.2f}**")
    return note + "."


def api_table(data: dict) -> str:
    header = ["nodes", "system", "writes/pod", "reads/pod", "writes in all runs"]
    rows = []
    for res in data["results"]:
        for s in data["systems"]:
            a = res["api"][s]
            writes = ", ".join(f"{k.split(' ', 1)[1]} {v}" for k, v in a["all_runs"]["by_resource"].items()
                               if k.startswith("write "))
            rows.append([res["nodes"], LABELS[s], f"{a['median_writes_per_pod']:.2f}",
                         f"{a['median_reads_per_pod']:.2f}", writes])
    return _table(header, rows, "---: --- ---: ---: ---")


def load_table(data: dict) -> str:
    t, m = data["throughput"], data["memory"]
    systems = list(t["median_s"])
    header = ["", *(LABELS[s] for s in systems), *(f"ours/{LABELS[p]}" for p in systems[1:])]
    rows = [[f"{t['jobs']} jobs × {t['pods_per_job']} pods, all Running (median, s)",
             *(f"{t['median_s'][s]:.1f}" for s in systems), *(f"{t['ratio_ours_to'][p]:.2f}" for p in systems[1:])],
            ["runs (s)", *(" / ".join(f"{v:.1f}" for v in t["runs_s"][s]) for s in systems),
             *([""] * (len(systems) - 1))]]
    # Every process's CPU seconds per burst (median), the cluster's own included: on 2 cores a burst lasts about
    # as long as the CPU all of them use. A process absent from a system's bursts (a peer's controller) is "–".
    cpu = t.get("cpu_s", {})
    procs = sorted({proc for s in systems for run in cpu.get(s, []) for proc in run} - {"registry"})
    rows += [[f"CPU s per burst: {proc}",
              *(f"{statistics.median(r[proc] for r in cpu[s]):.2f}" if all(proc in r for r in cpu[s]) else "–"
                for s in systems), *([""] * (len(systems) - 1))] for proc in procs]
    dropped = t.get("terminated_pod_watchers")
    if dropped:
        # Pod watchers kube-apiserver closed for falling behind the burst: each controller affected re-lists.
        rows.append(["pod watchers closed by kube-apiserver, per burst",
                     *(" / ".join(f"{v:.0f}" for v in dropped[s]) for s in systems), *([""] * (len(systems) - 1))])
    per_job = t.get("requests_per_job")
    if per_job:
        # A kind below 0.005 requests per job for every system is a stray request of the window (a watch
        # re-opened, a discovery read), not one the jobs make.
        kinds = sorted({k for s in systems for k, n in per_job[s]["by_resource"].items() if n >= 0.005})
        rows += [[f"requests per job: {k}", *(f"{per_job[s]['by_resource'].get(k, 0):.2f}" for s in systems),
                  *([""] * (len(systems) - 1))] for k in kinds]
        rows.append(["requests per job: writes (reads)",
                     *(f"{per_job[s]['writes']:.2f} ({per_job[s]['reads']:.2f})" for s in systems),
                     *([""] * (len(systems) - 1))])
    table = _table(header, rows, "--- " + "---: " * (2 * len(systems) - 1))
    return (table + f"\n\nOperator memory, {m['jobs']} jobs × {m['pods_per_job']} pods watched: idle "
            f"{m['idle_rss_mb']:.0f} MB, **peak (VmHWM) {m['peak_rss_mb']:.0f} MB**, after {m['rss_after_mb']:.0f} MB.")


def recovery_peers_table(data: dict) -> str:
    header = ["nodes", "system", "trials", "failure → gang median", "p99", "old pods gone → gang median", "p99"]
    rows = []
    for r in data["results"]:
        f, g = r["failure_to_gang_s"], r["old_gone_to_gang_s"]
        rows.append([r["nodes"], LABELS.get(r["system"], r["system"]), r["trials"],
                     f"{f['median']:.2f}" if f else "–", f"{f['p99']:.2f}" if f else "–",
                     f"{g['median']:.2f}" if g else "–", f"{g['p99']:.2f}" if g else "–"])
    return _table(header, rows, "---: --- ---: ---: ---: ---: ---:")


def recovery_table(data: dict) -> str:
    header = ["nodes", "trials", "failure → gang median", "p99", "old pods gone → gang median", "p99"]
    rows = []
    for r in data["results"]:
        f, g = r["failure_to_gang_s"], r["old_gone_to_gang_s"]
        rows.append([r["nodes"], r["trials"], f"{f['median']:.2f}", f"{f['p99']:.2f}",
                     f"{g['median']:.2f}" if g else "–", f"{g['p99']:.2f}" if g else "–"])
    return _table(header, rows, "---: ---: ---: ---: ---: ---:")


def node_loss_table(data: dict) -> str:
    header = ["system", "trials", "kill → replacement gang median", "worst", "timed out"]
    rows = []
    for s, res in data["results"].items():
        rows.append([LABELS.get(s, s), res["n"] if res else 0, f"{res['median']:.1f}" if res else "–",
                     f"{res['worst']:.1f}" if res else "–", data["timed_out"][s]])
    t, u = data["timings"], data["node_unknown_s"]
    ratio = data.get("ratio_jobset_to_ours")
    return (_table(header, rows, "--- ---: ---: ---: ---:")
            + f"\n\nSeconds from the kill of the doomed nodes' kwok (all at once); "
              f"{data['trials_per_side']} concurrent trials per side, {data['doomed_nodes']} doomed nodes. "
              + (f"JobSet/ours (medians): **{ratio:.1f}×**. " if ratio else "")
              + (f"Nodes seen Ready=Unknown after median {u['median']:.1f} s, worst {u['worst']:.1f} s; " if u else "")
              + f"heartbeats after the kill: {data['heartbeats_after_kill']['node_status']} status, "
                f"{data['heartbeats_after_kill']['lease']} lease. Timings ({data['timings_preset']}): "
                f"node-monitor-grace-period {t['node_monitor_grace_period']}, node-monitor-period "
                f"{t['node_monitor_period']}, default not-ready/unreachable tolerations "
                f"{t['not_ready_toleration_seconds']} s, lease {t['node_lease_duration_seconds']} s; "
                f"{data['machine']}. Command: `{data['command']}`."
            + _admin_note(data) + _blocked_note(data))


def _admin_note(data: dict) -> str:
    """The admin action the run applied to every dead node (both sides), when it applied one."""
    action = data.get("admin_action", "none")
    if action == "none":
        return ""
    a = data.get("admin_action_after_kill_s")
    what = {"out-of-service": "the taint `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`",
            "delete-node": "deletion of the Node object"}.get(action, action)
    return (f"\n\n**Requires an admin action:** {what} on every dead node, applied by the bench the moment the "
            f"node was seen Ready=Unknown (" + (f"median {a['median']:.1f} s after the kill" if a else "never")
            + "; no human reaction time counted), to both sides alike.")


def _blocked_note(data: dict) -> str:
    """What JobSet's timed-out trials waited on (read at the timeout), and whether an admin action ended it."""
    example = data.get("jobset_blocked_example")
    if not example:
        return ""
    note = (f"\n\nJobSet's timed-out trials, at the {data['timeout_s']['jobset']:.0f} s timeout "
            f"({data['timed_out']['jobset']} of {data['trials_per_side']}), first one: {example}.")
    after = data.get("after_timeout_action_to_gang_s") or {}
    if after:
        made = sorted(v for v in after.values() if v is not None)
        span = (f", {made[0]:.1f}" + (f"-{made[-1]:.1f}" if len(made) > 1 else "") + " s after the action"
                if made else "")
        note += (f" Then `{data['after_timeout_action']}` applied to their dead nodes: replacement gang in "
                 f"{len(made)} of {len(after)} trials{span}.")
    return note


GANG_MODES = {"gang": "native gang (PodGroup)", "nogang": "non-gang"}
GANG_MILESTONES = {"created": "all pods created", "first_bound": "first pod bound", "scheduled": "all pods bound",
                   "running": "all Running", "status": "job status Running",
                   "group_scheduled": "PodGroupScheduled=True"}


def _sched(run: dict, prefix: str, where: str = "") -> float:
    """Sum of one scheduler series' deltas over a run, across its labels (`where`: a label it must carry)."""
    return sum(v for k, v in run["scheduler"].items() if k.startswith(prefix + "{") and where in k)


GANG_SCHEDULER_ROWS = {
    "pod scheduling attempts": ("scheduler_schedule_attempts_total", "", "{:.0f}"),
    "of them unschedulable": ("scheduler_schedule_attempts_total", "result=unschedulable", "{:.0f}"),
    "pod attempts' summed duration (s)": ("scheduler_scheduling_attempt_duration_seconds_sum", "", "{:.2f}"),
    "pod-group attempts": ("scheduler_podgroup_schedule_attempts_total", "", "{:.0f}"),
    "pod-group attempts' summed duration (s)": ("scheduler_podgroup_scheduling_attempt_duration_seconds_sum", "",
                                                "{:.3f}"),
    "pod-group algorithm's summed duration (s)": ("scheduler_podgroup_scheduling_algorithm_duration_seconds_sum", "",
                                                  "{:.2f}"),
    "Filter evaluations (NodeResourcesFit, pod × node)": ("scheduler_plugin_evaluation_total",
                                                          "extension_point=Filter,plugin=NodeResourcesFit", "{:.0f}"),
    "Score evaluations (NodeResourcesFit, pod × node)": ("scheduler_plugin_evaluation_total",
                                                         "extension_point=Score,plugin=NodeResourcesFit", "{:.0f}"),
    "pods moved to the unschedulable queue": ("scheduler_queue_incoming_pods_total", "queue=unschedulable", "{:.0f}"),
    "pods moved to the active queue": ("scheduler_queue_incoming_pods_total", "queue=active", "{:.0f}"),
}


def gang_table(data: dict) -> str:
    results = {r["mode"]: r for r in data["results"]}
    modes = [m for m in GANG_MODES if m in results]
    both = len(modes) == 2
    header = ["milestone", *(GANG_MODES[m] for m in modes), *(["gang/non-gang"] if both else [])]
    rows = []
    for key, label in GANG_MILESTONES.items():
        cells = [f"{results[m]['median_s'][key]:.2f}" if key in results[m]["median_s"] else "–" for m in modes]
        ratio = data["ratio_gang_to_nogang"].get(key)
        rows.append([label, *cells, *([f"{ratio:.2f}" if ratio else "–"] if both else [])])
    for label, a, b in (("all created → first bound", "created", "first_bound"),
                        ("all created → all bound", "created", "scheduled"),
                        ("first bound → all bound", "first_bound", "scheduled")):
        spans = {m: statistics.median(r[b] - r[a] for r in results[m]["runs"]) for m in modes}
        rows.append([label, *(f"{spans[m]:.2f}" for m in modes),
                     *([f"{spans['gang'] / spans['nogang']:.2f}" if spans["nogang"] > 0 else "–"] if both else [])])
    runs = [["runs, all pods bound (s)", *(" / ".join(f"{r['scheduled']:.2f}" for r in results[m]["runs"])
                                           for m in modes), *([""] if both else [])]]
    timing = _table(header, rows + runs, "--- " + "---: " * (len(modes) + both))
    def cell(m: str, prefix: str, where: str, fmt: str) -> str:
        runs = results[m]["runs"]
        # A series no run of either mode has was not collected (an older JSON): "–", not 0.
        if not any(k.startswith(prefix + "{") for mode in modes for r in results[mode]["runs"] for k in r["scheduler"]):
            return "–"
        return fmt.format(statistics.median(_sched(r, prefix, where) for r in runs))

    sched_rows = [[label, *(cell(m, prefix, where, fmt) for m in modes)]
                  for label, (prefix, where, fmt) in GANG_SCHEDULER_ROWS.items()]
    sched = _table(["kube-scheduler's metrics per run (median)", *(GANG_MODES[m] for m in modes)], sched_rows,
                   "--- " + "---: " * len(modes))
    return (timing + f"\n\nMedians of {data['runs_per_mode']} runs per mode, seconds from the create request of one "
            f"{data['nodes']}-node job ({data['gpus_per_pod']} GPUs per pod, one pod per node); a cluster per mode, "
            f"{data['machine']}.\n\n" + sched + f"\n\nCommand: `{data['command']}`.")


def floor_table(data: dict) -> str:
    header = ["pod shape", "create body (bytes)", f"{data['nodes']} pods created (median, s)", "pods/s", "runs (s)"]
    rows = [[s, data["create_body_bytes"][s], f"{m:.2f}", f"{data['nodes'] / m:.0f}",
             " / ".join(f"{v:.2f}" for v in data["runs_s"][s])] for s, m in data["median_s"].items()]
    return (_table(header, rows, "--- ---: ---: ---: ---")
            + f"\n\nA bare client, {data['concurrency']} creates at a time over the operator's write path; "
              f"{data['machine']}.")


def mirror_table(data: dict) -> str:
    header = ["tree", "mirror MB/s", "`cp -r` MB/s", "`rsync -a` MB/s", "**mirror/cp**", "mirror/rsync",
              "CPU s (mirror / cp / rsync)"]
    rows = [[f"{t['bytes'] / 1e6:.0f} MB, {t['files']} files", *(f"{t['median_mb_s'][k]:.0f}" for k in
                                                                  ("mirror", "cp", "rsync")),
             f"**{t['ratio_mirror_to']['cp']:.2f}**", f"{t['ratio_mirror_to']['rsync']:.2f}",
             " / ".join(f"{t['median_cpu_s'][k]:.2f}" for k in ("mirror", "cp", "rsync"))] for t in data["trees"]]
    remirror = "; ".join(f"{r['how']}: {r['copied_pct']:.3f} % of the bytes copied, {r['read_pct']:.3f} % read"
                         for r in data["remirror"])
    return (_table(header, rows, "--- ---: ---: ---: ---: ---: ---:")
            + f"\n\nMedians of {data['rounds']} rotating rounds, each until durable (`sync`); {data['machine']}."
            + f" Re-mirror of the largest tree under new names: {remirror}.")


def mirror_chaos_table(data: dict) -> str:
    ops = data["operations"]
    row = [data["runs"], data["passes"], data["published_checked"],
           ", ".join(f"{k} {v}" for k, v in ops.items()), f"**{data['violations']}**"]
    return (_table(["runs", "mirror passes", "published checkpoints checked", "writer operations", "violations"],
                   [row], "---: ---: ---: --- ---:")
            + f"\n\n{data['ops_per_run']} writer operations per run, seeds {data['first_seed']}–"
              f"{data['first_seed'] + data['runs'] - 1}, {data['seconds']:.0f} s; O_TRUNC rewrites and plain "
              f"rmtree (open windows): {'on' if data.get('open_windows', True) else 'off'}.")


def failover_table(data: dict) -> str:
    header = ["leader stopped by", "trials", "→ standby leading, median", "p99", "→ new job's pods created, median",
              "p99"]
    labels = {"kill": "SIGKILL (Lease expires)", "term": "SIGTERM (Lease released)"}
    rows = [[labels.get(how, how), r["trials"], f"{r['leading_s']['median']:.2f}", f"{r['leading_s']['p99']:.2f}",
             f"{r['acting_s']['median']:.2f}", f"{r['acting_s']['p99']:.2f}"]
            for how, r in data["results"].items() if r]
    t = data["timings"]
    return (_table(header, rows, "--- ---: ---: ---: ---: ---:")
            + f"\n\nSeconds from the signal to the leader (a TrainingJob of {data['nodes_per_job']} nodes is created "
              f"right after it); two replicas, Lease {t['lease_duration_s']:g} s, renew deadline "
              f"{t['renew_deadline_s']:g} s, retry {t['retry_period_s']:g} s; {data['machine']}. "
              f"Command: `{data['command']}`.")


def huge_table(data: dict) -> str:
    h, m = data["huge"], data["many"]
    header = ["load", "all pods created", "all scheduled", "all Running", "job status Running", "pods/s to Running",
              "operator peak RSS (VmHWM)", "idle RSS", "status size"]
    reached = h["milestones_s"]
    rows = [[f"one {h['nodes']}-node job", *(f"{reached[k]:.1f} s" if k in reached else f"> {h['timeout_s']:.0f} s"
                                              for k in ("created", "scheduled", "running", "status")),
             f"{h['pods_per_s_running']:.0f}" if h.get("pods_per_s_running") else "–",
             f"**{h['peak_rss_mb']:.0f} MB**", f"{h['idle_rss_mb']:.0f} MB" if h.get("idle_rss_mb") else "–",
             f"{h['status_bytes']} bytes"],
            *([[f"{m['jobs']} jobs × {m['pods_per_job']} nodes", "", "", "", f"{m['all_running_s']:.1f} s", "",
                f"**{m['peak_rss_mb']:.0f} MB**", f"{m['idle_rss_mb']:.0f} MB" if m.get("idle_rss_mb") else "–", ""]]
              if m else [])]  # --rss-jobs 0: only the huge job
    return (_table(header, rows, "--- ---: ---: ---: ---: ---: ---: ---: ---:")
            + f"\n\nSeconds from the create request, one run, a fresh operator process per load (its VmHWM is that "
              f"load's); {data['kwok_nodes']} kwok nodes taking {data['pods_per_kwok_node']} pods each, no GPUs; "
              f"gang scheduling: {h.get('gang') or 'n/a'}, restarts during the start: {h.get('restarts', 0)}; "
              f"{data['machine']}.")


def plan_scale_table(data: dict) -> str:
    sizes = data["sizes"]
    header = ["step", *(f"{n} nodes (ms)" for n in sizes), "per-node cost, largest/smallest"]
    rows = [[step, *(f"{data['seconds'][str(n)][step] * 1000:.1f}" for n in sizes), f"{growth:.2f}×"]
            for step, growth in data["per_node_growth"].items()]
    rows.append(["status written (bytes, all Running)", *(f"{data['seconds'][str(n)]['status_bytes']:.0f}"
                                                         for n in sizes), ""])
    return _table(header, rows, "--- " + "---: " * (len(sizes) + 1))


def restart_table(data: dict) -> str:
    header = ["restart", "→ first reconcile (s)", "CPU s at it", "→ CPU settled (s)", "CPU s settled"]
    rows = [[str(i + 1), f"{r['first_reconcile_s']:.2f}", f"{r['cpu_at_first_s']:.2f}", f"{r['settled_s']:.1f}",
             f"{r['cpu_settled_s']:.2f}"] for i, r in enumerate(data["runs"])]
    md = data["medians"]
    rows.append(["**median**", f"**{md['first_reconcile_s']:.2f}**", f"**{md['cpu_at_first_s']:.2f}**",
                 f"{md['settled_s']:.1f}", f"{md['cpu_settled_s']:.2f}"])
    return (_table(header, rows, "--- ---: ---: ---: ---:")
            + f"\n\nA fresh operator process, a {data['nodes']}-node job Running and {data['nodes']} kwok nodes in the "
              f"cluster; seconds and CPU seconds (user + system) from the process's spawn; {data['machine']}.")


def drain_table(data: dict) -> str:
    header = ["side", "trials", "steps lost, median", "max", "drain s, median", "drain → training again s, median"]
    labels = {"checkpoint_first": f"checkpoint first (beforeDisruptionSeconds "
                                  f"{data['before_disruption_seconds']['checkpoint_first']})",
              "evicted": "evicted (beforeDisruptionSeconds 0, as before)"}
    rows = [[labels.get(side, side), len(data["results"][side]), s["steps_lost_median"], s["steps_lost_max"],
             f"{s['drain_s_median']:.1f}", f"{s['resumed_s_median']:.1f}"] for side, s in data["summary"].items()]
    return (_table(header, rows, "--- ---: ---: ---: ---: ---:")
            + f"\n\nThe real example on 2 of 4 real nodes (stock timings), periodic DCP checkpoints every "
              f"{data['checkpoint_every']} steps of 1 s, the node of one rank drained 3 steps after a periodic "
              f"checkpoint; steps lost = the last step attempt 0 trained minus the step attempt 1 resumed from. Both "
              f"sides alternate in one run. Command: `{data['command']}`.")


def in_place_table(data: dict) -> str:
    header = ["restartStrategy", "trials", "kill → every rank training s, median", "max", "steps redone, median",
              "same pods"]
    rows = [[data["strategies"][side], len(data["results"][side]), f"{s['back_s_median']:.1f}",
             f"{s['back_s_max']:.1f}", s["steps_redone_median"], "yes" if s["same_pods"] else "no"]
            for side, s in data["summary"].items()]
    return (_table(header, rows, "--- ---: ---: ---: ---: ---")
            + f"\n\nThe real example on 2 of 4 real nodes (stock timings; its trainers at one CPU, the last side "
              f"at 200m), DCP checkpoints every {data['checkpoint_every']} steps of 1 s; rank 1's training process "
              f"SIGKILLed 3 steps after a "
              f"checkpoint; until both ranks of the next attempt log a training step (torchrun's agent: until both "
              f"ranks' restarted workers log one; the operator counts no attempt there). The sides alternate in "
              f"one run. Command: `{data['command']}`.")


def spare_table(data: dict) -> str:
    header = ["side", "trials", "node killed → training resumed s, median", "max", "NodeLost after s, median",
              "counted restarts, median", "a spare took the rank"]
    rows = [[side.replace("_", " "), len(data["results"][side]), f"{s['back_s_median']:.1f}", f"{s['back_s_max']:.1f}",
             f"{s['detected_s_median']:.0f}", s["restarts_median"], "yes" if s["via_spare"] else "no"]
            for side, s in data["summary"].items()]
    return (_table(header, rows, "--- ---: ---: ---: ---: ---: ---")
            + "\n\nThe real example (restartStrategy InPlace) on 2 of 4 real nodes, stock timings; the real node of "
              "rank 0 killed (kubelet, containerd and containers SIGKILLed) once both ranks passed a mirrored "
              "checkpoint; until both ranks of the attempt that trains next log a training step. With a spare: "
              "`spareNodes: 1`, the rank goes to the warm spare; without: to a new pod on the fourth node. Either "
              "way the node is lost when its Lease is 20 s old (the rank that lived restarted in place without it). "
              f"Both sides alternate in one run. Command: `{data['command']}`.")


def elastic_table(data: dict) -> str:
    header = ["side", "trials", "node lost → training continues s, median", "max",
              "capacity back → full size s, median", "steps redone, median", "max", "gang restarts, median"]
    names = {"elastic": "elastic (minNodes 2)", "gang": "not elastic (gang restart)"}
    rows = [[names.get(side, side), len(data["results"][side]), f"{s['continues_s_median']:.1f}",
             f"{s['continues_s_max']:.1f}", f"{s['full_size_s_median']:.1f}" if side == "elastic" else "—",
             s["redone_median"], s["redone_max"], s["restarts_median"]]
            for side, s in data["summary"].items()]
    row = data.get("in_a_row") or {}
    tail = (f" Then one elastic job through {row['losses']} losses in a row (a pod deleted, back at world 3 before "
            f"the next): back at world 3 after {statistics.median(row['back_at_world_3_s']):.1f} s median, steps "
            f"redone {row['redone']}, still attempt {row['attempt']}, every resume within a checkpoint interval: "
            f"{'yes' if row['every_resume_within_a_checkpoint'] else 'no'}"
            + (f"; the job ({row['steps']} steps) ended {row['phase']}" if "phase" in row else "")
            + (f" (measured on its own: `{row['command']}`)" if "command" in row else "") + "." if row else "")
    return (_table(header, rows, "--- ---: ---: ---: ---: ---: ---: ---:")
            + "\n\nThe real example on 3 of 4 real nodes (stock timings), DCP checkpoints every "
              f"{data['checkpoint_every']} steps of 1 s; the node of the rank-0 pod cordoned and the pod deleted once "
              "every rank passed a mirrored checkpoint; until every rank that trains next logs a step (elastic: the "
              "two left, at world 2), then uncordoned. Both sides alternate in one run." + tail
            + f" Command: `{data['command']}`.")


RENDER = {"startup": startup_table, "api": api_table, "floor": floor_table, "load": load_table,
          "recovery_peers": recovery_peers_table, "recovery": recovery_table, "node_loss": node_loss_table,
          "node_loss_admin": node_loss_table, "gang": gang_table, "mirror": mirror_table,
          "mirror_chaos": mirror_chaos_table, "failover": failover_table, "huge": huge_table,
          "plan_scale": plan_scale_table, "restart": restart_table,
          "drain": drain_table, "in_place": in_place_table, "spare": spare_table,
          "elastic": elastic_table}
FROM = {"startup": "startup", "api": "startup", "floor": "floor", "load": "load", "recovery_peers": "recovery_peers",
        "recovery": "recovery", "node_loss": "node_loss", "node_loss_admin": "node_loss_admin", "gang": "gang",
        "mirror": "mirror", "mirror_chaos": "mirror_chaos", "failover": "failover", "huge": "huge",
        "plan_scale": "plan_scale", "restart": "restart", "drain": "drain", "in_place": "in_place",
        "spare": "spare", "elastic": "elastic"}


def replace_section(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- bench:{name} -->\n)(?:.*?\n)?(<!-- /bench:{name} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"docs/benchmarks.md has no <!-- bench:{name} --> section")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", type=Path, default=REPO / ".cache" / "bench")
    parser.add_argument("--docs", type=Path, default=REPO / "docs")
    args = parser.parse_args(argv)
    combined_path = args.docs / "benchmarks.json"
    combined = json.loads(combined_path.read_text()) if combined_path.exists() else {}
    found = {name: json.loads((args.source / f"{name}.json").read_text())
             for name in SOURCES if (args.source / f"{name}.json").exists()}
    combined.update(found)
    combined_path.write_text(json.dumps(combined, indent=2) + "\n")
    md_path = args.docs / "benchmarks.md"
    text = md_path.read_text()
    for section, source in FROM.items():
        if source in combined:
            text = replace_section(text, section, RENDER[section](combined[source]))
    md_path.write_text(text)
    print(f"wrote {combined_path} ({', '.join(found) or 'nothing new'}) and the tables of {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
