"""Benchmark: one rank's training process killed → every rank training again, with failurePolicy.restartStrategy
InPlace (the gang restarts in its pods) against the default BlockingRecreate (every pod deleted and created
again), in one run on real nodes.

    .venv/bin/python -P tools/bench/in_place.py [--trials 3]

The real example (examples/real/: torchrun, DDP over gloo on CPU, DCP checkpoints every CHECKPOINT_EVERY=5
steps, STEP_SECONDS=1) on the test session's real-node cluster (4 kubelet + containerd nodes, stock
timings), the operator installed from the registry's chart by helm, its default backoff (5 s before a
recreated attempt; an in-place one has none). Each trial, for each side (alternating), starts the job, waits
until both ranks passed step 2·CHECKPOINT_EVERY+3, SIGKILLs rank 1's training process (torchrun then exits
non-zero) and measures:
  back s          the kill → both ranks of the next attempt logged a training step
  steps redone    the last step attempt 0 logged - the step of the checkpoint the next attempt resumed from
  same pods       whether the next attempt ran in the same pods (UIDs) as attempt 0
Writes .cache/bench/in_place.json; tools/bench/report.py puts the table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from localcluster.faults import kill_worker_script
from localcluster.harness import realexample
from localcluster.harness.kube import allow_host_path, kubectl, new_namespace
from localcluster.harness.waiting import wait_for
from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from tests.support.realnodes import RealClusterSlot, attempt_logs, clients

OUT = REPO / ".cache" / "bench" / "in_place.json"
JOB = "real-train"
STEP = re.compile(r"^step=(\d+) rank=\d+ loss=", re.M)
EVERY = 5
SIDES = {"in_place": "InPlace", "recreate": "BlockingRecreate"}
KILL_WORKER = kill_worker_script("/app/train.py")


def _status(custom, namespace: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, JOB).get("status") or {}


def _steps(log: str) -> list[int]:
    return [int(s) for s in STEP.findall(log)]


def trial(cluster, strategy: str, folder: Path) -> dict:
    core, custom = clients(cluster)
    kc = str(cluster.kubeconfig)
    namespace = new_namespace(core, prefix="benchinplace")
    allow_host_path(core, namespace)
    manifest = yaml.safe_load((folder / "trainingjob.yaml").read_text())
    manifest["spec"]["failurePolicy"]["restartStrategy"] = strategy
    realexample.set_env(manifest, TRAIN_STEPS="100000", CHECKPOINT_EVERY=str(EVERY))
    (folder / "trainingjob.yaml").write_text(yaml.safe_dump(manifest))
    try:
        kubectl(kc, "apply", "-n", namespace, "-f", str(folder))

        def past(attempt: int, step: int):
            logs = attempt_logs(core, namespace, JOB, attempt)
            steps = [_steps(log) for log in logs.values()]
            return logs if len(logs) == 2 and all(s and s[-1] >= step for s in steps) else None

        wait_for(lambda: past(0, 2 * EVERY + 3), timeout=600, what="attempt 0 training")
        uids = {p.metadata.uid for p in core.list_namespaced_pod(
            namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items}
        last = max(max(_steps(log)) for log in attempt_logs(core, namespace, JOB, 0).values())
        started = time.monotonic()
        killed = kubectl(kc, "exec", "-n", namespace, f"{JOB}-1-a0", "-c", "trainer", "--", "python3", "-c",
                         KILL_WORKER).stdout
        if not killed.startswith("killed"):
            raise AssertionError(f"the kill did not find the worker: {killed}")
        wait_for(lambda: past(1, 0), timeout=600, what="attempt 1 training", interval=0.2)
        back = time.monotonic() - started
        # The steps attempt 0 logged up to its end (the kill, or the peer's collective failing after it).
        status = _status(custom, namespace)
        match = re.search(r"step-(\d+)$", status.get("resumedFrom") or "")
        resumed = int(match.group(1)) if match else 0
        now_uids = {p.metadata.uid for p in core.list_namespaced_pod(
            namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items if not p.metadata.deletion_timestamp}
        return {"back_s": round(back, 2), "steps_redone": max(0, last - resumed), "last_step_seen": last,
                "resumed_step": resumed, "same_pods": now_uids == uids,
                "restart_reason": status["restartHistory"][-1]["reason"]}
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
        cluster, _ = slot.operator()
        for n in range(args.trials):
            for side, strategy in SIDES.items():  # side by side, alternating
                folder = realexample.write_manifests(cluster.registry, OUT.parent / f"in-place-{side}-{n}")
                result = trial(cluster, strategy, folder)
                print(f"trial {n} {side}: {json.dumps(result)}", flush=True)
                results[side].append(result)
    finally:
        slot.release()
    summary = {side: {"back_s_median": statistics.median(r["back_s"] for r in rs),
                      "back_s_max": max(r["back_s"] for r in rs),
                      "steps_redone_median": statistics.median(r["steps_redone"] for r in rs),
                      "same_pods": all(r["same_pods"] for r in rs)}
               for side, rs in results.items()}
    data = {"trials": args.trials, "checkpoint_every": EVERY, "strategies": SIDES, "summary": summary,
            "results": results, "command": "python -P tools/bench/in_place.py --trials " + str(args.trials)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=2))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
