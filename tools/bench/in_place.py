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

import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from example_trial import JOB, alternate, start, steps, summarize, trials_argument, write_results
from localcluster.faults import kill_worker_script
from localcluster.harness.kube import kubectl
from localcluster.harness.waiting import wait_for
from tests.support.realnodes import attempt_logs

OUT = REPO / ".cache" / "bench" / "in_place.json"
SIDES = {"in_place": "InPlace", "recreate": "BlockingRecreate"}
KILL_WORKER = kill_worker_script("/app/train.py")


def trial(cluster, operator_namespace: str, strategy: str, folder: Path) -> dict:
    job = start(cluster, folder, "benchinplace",
                lambda manifest: manifest["spec"]["failurePolicy"].update(restartStrategy=strategy))
    core, namespace = job.core, job.namespace
    try:
        uids = {p.metadata.uid for p in job.pods()}
        last = max(max(steps(log)) for log in attempt_logs(core, namespace, JOB, 0).values())
        started = time.monotonic()
        killed = kubectl(job.kubeconfig, "exec", "-n", namespace, f"{JOB}-1-a0", "-c", "trainer", "--", "python3",
                         "-c", KILL_WORKER).stdout
        if not killed.startswith("killed"):
            raise AssertionError(f"the kill did not find the worker: {killed}")
        wait_for(lambda: job.past(1, 0), timeout=600, what="attempt 1 training", interval=0.2)
        back = time.monotonic() - started
        status = job.status()
        match = re.search(r"step-(\d+)$", status.get("resumedFrom") or "")
        resumed = int(match.group(1)) if match else 0
        now_uids = {p.metadata.uid for p in job.pods() if not p.metadata.deletion_timestamp}
        return {"back_s": round(back, 2), "steps_redone": max(0, last - resumed), "last_step_seen": last,
                "resumed_step": resumed, "same_pods": now_uids == uids,
                "restart_reason": status["restartHistory"][-1]["reason"]}
    finally:
        job.delete()


def main() -> int:
    trials = trials_argument(__doc__)
    results = alternate(SIDES, trials, OUT, trial)
    summary = summarize(results, median=("back_s", "steps_redone"), most=("back_s",), every=("same_pods",))
    return write_results(OUT, trials, summary, results, strategies=SIDES)


if __name__ == "__main__":
    sys.exit(main())
