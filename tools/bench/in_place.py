"""Benchmark: one rank's training process killed → every rank training again, with failurePolicy.restartStrategy
InPlace (the gang restarts in its pods) against the default BlockingRecreate (every pod deleted and created
again), against torchrun's own agent restarting its workers (spec.elastic with minNodes = numNodes: the
c10d rendezvous every agent can rejoin, no container restarted), and against InPlace with the trainer held to
200m CPU (the example's value before: its limit as much as its request), in one run on real nodes.

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
The agent side has no next attempt (the operator does not see torchrun's restarts): it waits until both
ranks' workers logged their start again and a training step after it, and reads the step it resumed from in
the log.
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
AGENT = "torchrun agent (elastic, minNodes 2 of 2)"
# InPlace with the trainer's CPU the example had until it was found to cost most of the restart: every Python and
# torch start, the preflight's and the trainer's, ran at a fifth of a core.
THROTTLED = "InPlace, trainer cpu 200m"
THROTTLED_CPU = "200m"
SIDES = {"in_place": "InPlace", "recreate": "BlockingRecreate", "agent": AGENT, "in_place_throttled": THROTTLED}
KILL_WORKER = kill_worker_script("/app/train.py")
# What examples/real/train.py prints when a worker starts, and after it resumed.
WORKER_START = re.compile(r"^attempt=\d* rank=\d+ world=\d+ restart=\d*$", re.M)
RESUMED = re.compile(r"^resumed_from=\S*step-(\d+) ", re.M)


def edit_for(side: str):
    def edit(manifest: dict) -> None:
        if side == AGENT:
            manifest["spec"]["elastic"] = {"minNodes": manifest["spec"]["numNodes"]}
        elif side == THROTTLED:
            manifest["spec"]["failurePolicy"].update(restartStrategy="InPlace")
            manifest["spec"]["resourcesPerNode"]["cpu"] = THROTTLED_CPU
        else:
            manifest["spec"]["failurePolicy"].update(restartStrategy=side)
    return edit


def workers_restarted(job) -> dict[int, str] | None:
    """Attempt 0's logs after each rank's workers started again (torchrun's agent restarted them) once both
    logged a training step since; None before."""
    tails = {}
    for index, log in attempt_logs(job.core, job.namespace, JOB, 0).items():
        starts = list(WORKER_START.finditer(log))
        tail = log[starts[-1].end():] if len(starts) >= 2 else ""
        if not steps(tail):
            return None
        tails[index] = tail
    return tails if len(tails) == 2 else None


def trial(cluster, operator_namespace: str, side: str, folder: Path) -> dict:
    job = start(cluster, folder, "benchinplace", edit_for(side))
    core, namespace = job.core, job.namespace
    try:
        uids = {p.metadata.uid for p in job.pods()}
        last = max(max(steps(log)) for log in attempt_logs(core, namespace, JOB, 0).values())
        started = time.monotonic()
        killed = kubectl(job.kubeconfig, "exec", "-n", namespace, f"{JOB}-1-a0", "-c", "trainer", "--", "python3",
                         "-c", KILL_WORKER).stdout
        if not killed.startswith("killed"):
            raise AssertionError(f"the kill did not find the worker: {killed}")
        if side == AGENT:
            tails = wait_for(lambda: workers_restarted(job), timeout=600, what="workers restarted, training",
                             interval=0.2)
        else:
            wait_for(lambda: job.past(1, 0), timeout=600, what="attempt 1 training", interval=0.2)
        back = time.monotonic() - started
        status = job.status()
        if side == AGENT:
            match = RESUMED.search(next(iter(tails.values())))
            reason = f"none counted (attempt {status.get('attempt', 0)}, restarts {status.get('restarts', 0)})"
        else:
            match = re.search(r"step-(\d+)$", status.get("resumedFrom") or "")
            reason = status["restartHistory"][-1]["reason"]
        resumed = int(match.group(1)) if match else 0
        now_uids = {p.metadata.uid for p in job.pods() if not p.metadata.deletion_timestamp}
        return {"back_s": round(back, 2), "steps_redone": max(0, last - resumed), "last_step_seen": last,
                "resumed_step": resumed, "same_pods": now_uids == uids, "restart_reason": reason}
    finally:
        job.delete()


def main() -> int:
    trials = trials_argument(__doc__)
    results = alternate(SIDES, trials, OUT, trial)
    summary = summarize(results, median=("back_s", "steps_redone"), most=("back_s",), every=("same_pods",))
    return write_results(OUT, trials, summary, results, strategies=SIDES)


if __name__ == "__main__":
    sys.exit(main())
