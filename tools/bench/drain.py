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

import re
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from example_trial import alternate, start, steps, summarize, trials_argument, write_results
from localcluster.harness.drain import draining
from localcluster.harness.waiting import wait_for
from tests.support.realnodes import follow_log, leading_operator

OUT = REPO / ".cache" / "bench" / "drain.json"
SIDES = {"checkpoint_first": 120, "evicted": 0}


def trial(cluster, operator_namespace: str, before_seconds: int, folder: Path) -> dict:
    job = start(cluster, folder, "benchdrain",
                lambda manifest: manifest["spec"]["checkpointing"].update(beforeDisruptionSeconds=before_seconds))
    core, namespace = job.core, job.namespace
    try:
        # The drain comes 3 steps after a periodic checkpoint (start waits for that).
        pods = {p.metadata.name: p.spec.node_name for p in job.pods() if p.metadata.name.endswith("-a0")}
        leader = wait_for(lambda: leading_operator(core, operator_namespace), timeout=60, what="a leader")
        node = next(n for _, n in sorted(pods.items()) if n != leader.spec.node_name)
        old_logs: dict[str, str] = {}
        followers = [threading.Thread(target=lambda p=p: old_logs.__setitem__(p, follow_log(core, namespace, p,
                                                                                             "trainer")),
                                      daemon=True) for p in sorted(pods)]
        for f in followers:
            f.start()
        started = time.monotonic()
        with draining(job.kubeconfig, node) as drain:
            code, output = drain.wait(timeout=400)
            drained = time.monotonic() - started
            if code != 0:
                raise AssertionError(f"drain failed ({code}): {output}")
            # Still cordoned, as in a maintenance: attempt 1 is placed elsewhere.
            wait_for(lambda: job.past(1, 0), timeout=600, what="attempt 1 training")
            resumed_s = time.monotonic() - started
        for f in followers:
            f.join(timeout=120)
        status = job.status()
        resumed = status.get("resumedFrom") or ""
        match = re.search(r"step-(\d+)$", resumed)
        resumed_step = int(match.group(1)) if match else 0
        last = max(s for log in old_logs.values() for s in steps(log))
        return {"steps_lost": last - resumed_step, "last_step": last, "resumed_step": resumed_step,
                "drain_s": round(drained, 2), "resumed_s": round(resumed_s, 2),
                "restart_reason": status["restartHistory"][-1]["reason"],
                "request": status.get("checkpointRequest")}
    finally:
        job.delete()


def main() -> int:
    trials = trials_argument(__doc__)
    results = alternate(SIDES, trials, OUT, trial)
    summary = summarize(results, median=("steps_lost", "drain_s", "resumed_s"), most=("steps_lost",))
    return write_results(OUT, trials, summary, results, before_disruption_seconds=SIDES)


if __name__ == "__main__":
    sys.exit(main())
