"""Benchmark: `kubectl drain` of a node of a running job on real nodes → training resumed on other nodes, with
checkpointing.beforeDisruptionSeconds (the operator asks for a checkpoint and holds the drain until it is
mirrored) against without it (the eviction ends the attempt at once, NodeLost, as before), in one run.

    .venv/bin/python -P tools/bench/drain.py [--trials 3]

The real example (examples/real/: torchrun, DDP over gloo on CPU, DCP checkpoints every CHECKPOINT_EVERY=5
steps, STEP_SECONDS=1) on the test session's real-node cluster (4 kubelet + containerd nodes, stock
timings), the operator installed from the registry's chart by helm. Each trial, for each side, starts the
job, waits until both ranks passed a step chosen so that the last periodic checkpoint is 3 steps old
(steps lost without a checkpoint on request: 3 plus what is trained while the drain runs), drains the node
of one rank (never the operator leader's) and measures:
  steps lost    the last step attempt 0 logged - the step of the checkpoint attempt 1 resumed from
  drain s       kubectl drain started → it exited
  resumed s     drain started → both ranks of attempt 1 logged a training step
Writes .cache/bench/drain.json; tools/bench/report.py puts the table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from localcluster.harness import realexample
from localcluster.harness.drain import draining
from localcluster.harness.kube import allow_host_path, kubectl, new_namespace
from localcluster.harness.waiting import wait_for
from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from tests.support.realnodes import (RealClusterSlot, attempt_logs, clients, follow_log,
                                     leading_operator)

OUT = REPO / ".cache" / "bench" / "drain.json"
JOB = "real-train"
STEP = re.compile(r"^step=(\d+) rank=\d+ loss=", re.M)
EVERY = 5
SIDES = {"checkpoint_first": 120, "evicted": 0}


def _status(custom, namespace: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, JOB).get("status") or {}


def _steps(log: str) -> list[int]:
    return [int(s) for s in STEP.findall(log)]


def trial(cluster, operator_namespace: str, before_seconds: int, folder: Path) -> dict:
    core, custom = clients(cluster)
    kc = str(cluster.kubeconfig)
    namespace = new_namespace(core, prefix="benchdrain")
    allow_host_path(core, namespace)
    manifest = yaml.safe_load((folder / "trainingjob.yaml").read_text())
    manifest["spec"]["checkpointing"]["beforeDisruptionSeconds"] = before_seconds
    realexample.set_env(manifest, TRAIN_STEPS="100000", CHECKPOINT_EVERY=str(EVERY))
    (folder / "trainingjob.yaml").write_text(yaml.safe_dump(manifest))
    try:
        kubectl(kc, "apply", "-n", namespace, "-f", str(folder))

        def past(attempt: int, step: int):
            logs = attempt_logs(core, namespace, JOB, attempt)
            steps = [_steps(log) for log in logs.values()]
            return logs if len(logs) == 2 and all(s and s[-1] >= step for s in steps) else None

        # Drain 3 steps after a periodic checkpoint (after step 2·EVERY: one is mirrored for sure).
        wait_for(lambda: past(0, 2 * EVERY + 3), timeout=600, what="attempt 0 training")
        pods = {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(
            namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items if p.metadata.name.endswith("-a0")}
        leader = wait_for(lambda: leading_operator(core, operator_namespace), timeout=60, what="a leader")
        node = next(n for _, n in sorted(pods.items()) if n != leader.spec.node_name)
        old_logs: dict[str, str] = {}
        followers = [threading.Thread(target=lambda p=p: old_logs.__setitem__(p, follow_log(core, namespace, p,
                                                                                             "trainer")),
                                      daemon=True) for p in sorted(pods)]
        for f in followers:
            f.start()
        started = time.monotonic()
        with draining(kc, node) as drain:
            code, output = drain.wait(timeout=400)
            drained = time.monotonic() - started
            if code != 0:
                raise AssertionError(f"drain failed ({code}): {output}")
            # Still cordoned, as in a maintenance: attempt 1 is placed elsewhere.
            wait_for(lambda: past(1, 0), timeout=600, what="attempt 1 training")
            resumed_s = time.monotonic() - started
        for f in followers:
            f.join(timeout=120)
        status = _status(custom, namespace)
        resumed = status.get("resumedFrom") or ""
        match = re.search(r"step-(\d+)$", resumed)
        resumed_step = int(match.group(1)) if match else 0
        last = max(s for log in old_logs.values() for s in _steps(log))
        return {"steps_lost": last - resumed_step, "last_step": last, "resumed_step": resumed_step,
                "drain_s": round(drained, 2), "resumed_s": round(resumed_s, 2),
                "restart_reason": status["restartHistory"][-1]["reason"],
                "request": status.get("checkpointRequest")}
    finally:
        core.delete_namespace(namespace)
        wait_for(lambda: namespace not in {n.metadata.name for n in core.list_namespace().items}, timeout=180,
                 what=f"namespace {namespace} gone")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    slot = RealClusterSlot()
    results: dict[str, list[dict]] = {side: [] for side in SIDES}
    try:
        cluster, operator_namespace = slot.operator()
        for n in range(args.trials):
            for side, seconds in SIDES.items():  # side by side, alternating
                folder = realexample.write_manifests(cluster.registry, OUT.parent / f"drain-{side}-{n}")
                result = trial(cluster, operator_namespace, seconds, folder)
                print(f"trial {n} {side}: {json.dumps(result)}", flush=True)
                results[side].append(result)
    finally:
        slot.release()
    summary = {side: {"steps_lost_median": statistics.median(r["steps_lost"] for r in rs),
                      "steps_lost_max": max(r["steps_lost"] for r in rs),
                      "drain_s_median": statistics.median(r["drain_s"] for r in rs),
                      "resumed_s_median": statistics.median(r["resumed_s"] for r in rs)}
               for side, rs in results.items()}
    data = {"trials": args.trials, "checkpoint_every": EVERY, "before_disruption_seconds": SIDES,
            "summary": summary, "results": results,
            "command": "python -P tools/bench/drain.py --trials " + str(args.trials)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=2))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
