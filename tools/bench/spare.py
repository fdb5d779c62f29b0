"""Benchmark: a real node dies (its kubelet, containerd and containers SIGKILLed, stock timings) → training
resumed, with a hot spare (spec.spareNodes: 1) against without one, both restartStrategy InPlace, in one run.

    .venv/bin/python -P tools/bench/spare.py [--trials 3]

The real example (examples/real/: torchrun, DDP over gloo on CPU, DCP checkpoints every 5 steps) on the test
session's real-node cluster (4 kubelet + containerd nodes), the operator installed from the registry's chart.
The job stays off the leading operator replica's node (a node affinity), so the node that dies never takes
the operator with it: the 2 ranks and the spare use the other 3 nodes; without a spare, the third is where
the lost rank's new pod goes. Each trial, for each side (alternating), starts the job, waits until both ranks
passed a mirrored checkpoint, kills the real node of rank 0 (the leader: the rendezvous moves) and measures:
  back s          the kill → both ranks of the attempt that trains next logged a training step
  detected s      the kill → the operator's NodeLost (restartHistory's time; whole seconds)
  restarts        counted restarts after it (a lost node is not the job's fault: 0)
  via spare       whether a spare took the rank (restartHistory[].spare)
The dead node is started again after each trial. Writes .cache/bench/spare.json; tools/bench/report.py puts
the table into docs/benchmarks.md.
"""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from example_trial import JOB, alternate, start, summarize, trials_argument, write_results
from localcluster.harness.waiting import wait_for
from multinode.api.constants import LABEL_HOSTNAME
from multinode.api.timestamps import parse_time
from tests.support.realnodes import clients, leading_operator

OUT = REPO / ".cache" / "bench" / "spare.json"
SIDES = {"spare": 1, "no_spare": 0}


def _edit(spares: int, leader_node: str):
    def edit(manifest: dict) -> None:
        spec = manifest["spec"]
        spec["failurePolicy"] = {**spec.get("failurePolicy", {}), "restartStrategy": "InPlace"}
        spec["spareNodes"] = spares
        spec.setdefault("podTemplate", {})["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": LABEL_HOSTNAME, "operator": "NotIn", "values": [leader_node]}]}]}}}
    return edit


def _resumed(job) -> int | None:
    """The attempt that trains now, once both its ranks logged a step after the loss; None before."""
    status = job.status()
    last = (status.get("restartHistory") or [{}])[-1]
    if last.get("reason") != "NodeLost" or status.get("phase") != "Running":
        return None
    return status["attempt"] if job.past(status["attempt"], 0) else None


def _stuck(job) -> str:
    """What a trial that never resumed waits on: the job's status, its pods and the tails of their logs."""
    status = job.status()
    keys = ("phase", "attempt", "podsAttempt", "restarts", "restartHistory", "conditions", "nodeStatuses", "spares")
    lines = [f"status: {json.dumps({k: status.get(k) for k in keys})}"]
    for pod in job.pods():
        meta = pod.metadata
        lines.append(f"pod {meta.name} node={pod.spec.node_name} phase={pod.status.phase} "
                     f"deleting={bool(meta.deletion_timestamp)} annotations={meta.annotations}")
        for cs in [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]:
            lines.append(f"  {cs.name}: restarts={cs.restart_count} state={cs.state.to_dict()}")
        try:
            lines.append("  log: " + job.core.read_namespaced_pod_log(meta.name, job.namespace, container="trainer",
                                                                      tail_lines=15).replace("\n", "\n  log: "))
        except Exception as e:  # noqa: BLE001 - a diagnostic: whatever the kubelet answers is worth printing
            lines.append(f"  log: {e}")
    return "\n".join(lines)


def trial(cluster, operator_namespace: str, spares: int, folder: Path) -> dict:
    leader = leading_operator(clients(cluster)[0], operator_namespace)
    assert leader is not None, "one operator replica leads"
    job = start(cluster, folder, "benchspare", _edit(spares, leader.spec.node_name))
    killed = None
    try:
        if spares:
            wait_for(lambda: ((job.status().get("spares") or {}).get("warm") == 1) or None, timeout=300,
                     what="the spare warm")
        rank0 = next(p for p in job.pods() if p.metadata.name == f"{JOB}-0-a0")
        killed = int(re.search(r"(\d+)$", rank0.spec.node_name).group(1))
        killed_at, wall = time.monotonic(), datetime.now(timezone.utc)
        cluster.kill_real_node(killed)
        try:
            wait_for(lambda: _resumed(job), timeout=300, what="training resumed after the node loss", interval=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{_stuck(job)}") from None
        back = time.monotonic() - killed_at
        status = job.status()
        lost = next(r for r in status["restartHistory"] if r["reason"] == "NodeLost")
        detected = (parse_time(lost["time"], wall) - wall.replace(microsecond=0)).total_seconds()
        return {"back_s": round(back, 2), "detected_s": detected, "restarts": status["restarts"],
                "via_spare": lost.get("spare") is not None, "attempt": status["attempt"],
                "how": lost["message"][:160]}
    finally:
        if killed is not None:
            cluster.restart_real_node(killed)
        job.delete()


def main() -> int:
    trials = trials_argument(__doc__)
    results = alternate(SIDES, trials, OUT, trial)
    summary = summarize(results, median=("back_s", "detected_s", "restarts"), most=("back_s",),
                        every=("via_spare",))
    return write_results(OUT, trials, summary, results, spares=SIDES)


if __name__ == "__main__":
    sys.exit(main())
