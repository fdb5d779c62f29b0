"""Benchmark: a node of a 3-node job lost (cordoned, its pod deleted), elastic (spec.elastic minNodes 2: the rest
train on) against not (the gang restarts in new pods), side by side in one run; then one elastic job through
10 losses in a row.

    .venv/bin/python -P tools/bench/elastic.py [--trials 3] [--losses 10] [--row-steps 400] [--only-losses]

The real example (examples/real/: torchrun, DDP over gloo on CPU, DCP checkpoints every 5 steps), 3 nodes, on
the test session's real-node cluster (4 kubelet + containerd nodes), the operator installed from the registry's
chart. The elastic side is examples/real/elastic/ (c10d rendezvous on a store pod of its own); the other is the
same job without spec.elastic (a static rendezvous, restartStrategy Recreate). Each trial, for each side
(alternating), starts the job, waits until every rank passed a mirrored checkpoint, cordons the node of the
rank-0 pod and deletes the pod, and measures:
  continues s     the delete → every rank training next logged a step (elastic: the two left, at world 2;
                  the gang: the new attempt's three)
  full size s     the uncordon → three ranks training at world 3 (elastic; the gang is at full size already)
  redone          steps trained again after the loss: the last step logged before it, minus the step the
                  training resumed from
  restarts        gang restarts (counted or not) after it
Then --losses times in a row, one elastic job: a pod of the job deleted (no cordon: it comes back after the
resize window), training back at world 3 before the next; the job must end Succeeded, with no resume further
back than a checkpoint interval. Writes .cache/bench/elastic.json; tools/bench/report.py puts the table into
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from example_trial import EVERY, ExampleJob, run_command, summarize, write_results
from localcluster.harness import realexample
from localcluster.harness.kube import allow_host_path, kubectl, new_namespace
from localcluster.harness.waiting import wait_for
from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from multinode.api.constants import LABEL_RENDEZVOUS_STORE
from tests.support.realnodes import RealClusterSlot, clients, pod_log

OUT = REPO / ".cache" / "bench" / "elastic.json"
SIDES = ("elastic", "gang")
JOB = "real-elastic"
STEP = re.compile(r"^step=(\d+) rank=\d+ loss=", re.M)
WORLD = re.compile(r"^attempt=(\S*) rank=(\d+) world=(\d+)", re.M)
RESUMED = re.compile(r"^resumed_from=\S+ step=(\d+)", re.M)


def _status(job: ExampleJob) -> dict:
    return job.custom.get_namespaced_custom_object(GROUP, VERSION, job.namespace, PLURAL, JOB).get("status") or {}


def _pods(job: ExampleJob) -> dict:
    return {p.metadata.name: p for p in job.core.list_namespaced_pod(
        job.namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items
        if LABEL_RENDEZVOUS_STORE not in (p.metadata.labels or {}) and not p.metadata.deletion_timestamp}


def _log(job: ExampleJob, name: str) -> str:
    try:
        return pod_log(job.core, job.namespace, name) or ""
    except Exception:  # noqa: BLE001 - not started yet, or gone: nothing logged to read
        return ""


def _rounds(log: str) -> list[tuple[int, int, list[int]]]:
    """Each round of training the pod's workers joined: (attempt, world size, steps trained in it)."""
    found = list(WORLD.finditer(log))
    ends = [m.start() for m in found[1:]] + [len(log)] if found else []
    return [(int(m.group(1)) if m.group(1).isdigit() else 0, int(m.group(3)),
             [int(s.group(1)) for s in STEP.finditer(log, m.end(), end)]) for m, end in zip(found, ends, strict=True)]


def _training(job: ExampleJob, world: int, *, attempt: int = 0, rounds: dict[str, int] | None = None,
              names: list[str] | None = None) -> dict[str, str] | None:
    """The logs of the pods (`names`, or the job's pods) once each trained a step in a round of `world` ranks
    of `attempt`, newer than the first rounds[name] rounds of the pod; None before."""
    pods = names or list(_pods(job))
    logs = {name: _log(job, name) for name in pods}
    for name, log in logs.items():
        newer = _rounds(log)[(rounds or {}).get(name, 0):]
        if not any(got == attempt and size == world and steps for got, size, steps in newer):
            return None
    return logs if len(logs) == (len(names) if names else world) else None


def _start(cluster, folder: Path, elastic: bool, steps: int = 100000) -> ExampleJob:
    core, custom = clients(cluster)
    kc = str(cluster.kubeconfig)
    job = ExampleJob(core, custom, kc, new_namespace(core, prefix="benchelastic"))
    allow_host_path(core, job.namespace)
    manifest = yaml.safe_load(realexample.manifest_text("elastic/trainingjob.yaml", cluster.registry))
    realexample.set_env(manifest, TRAIN_STEPS=str(steps), CHECKPOINT_EVERY=str(EVERY))
    if not elastic:
        del manifest["spec"]["elastic"]
    (folder / "trainingjob.yaml").write_text(yaml.safe_dump(manifest))
    kubectl(kc, "apply", "-n", job.namespace, "-f", str(folder))
    wait_for(lambda: ((logs := _training(job, 3)) and all(max(_rounds(log)[-1][2]) > 2 * EVERY + 3
                                                         for log in logs.values())) or None,
             timeout=600, what="three ranks training")
    return job


def _last_step(logs: dict[str, str]) -> int:
    """The highest step any rank logged."""
    return max(max([int(s) for s in STEP.findall(log)], default=0) for log in logs.values())


def _redone(before: dict[str, str], after: dict[str, str]) -> int:
    """The last step logged before the loss minus the step the next round resumed from."""
    last = _last_step(before)
    resumed = [int(m[-1]) for log in after.values() if (m := RESUMED.findall(log))]
    return last - max(resumed) if resumed else last


def trial(cluster, side: str, folder: Path) -> dict:
    elastic = side == "elastic"
    job = _start(cluster, folder, elastic)
    cordoned: list[str] = []
    try:
        pods = _pods(job)
        logs = {name: _log(job, name) for name in pods}
        rank0 = next(name for name, log in logs.items() if WORLD.findall(log)[-1][1] == "0")
        # The elastic job's fourth machine (its store's) cordoned too: no room for the lost node's new pod until
        # it is uncordoned. The gang restarts on the three machines left, the fourth among them.
        store = [p.spec.node_name for p in job.core.list_namespaced_pod(
            job.namespace, label_selector=LABEL_RENDEZVOUS_STORE).items] if elastic else []
        for node in [pods[rank0].spec.node_name, *store]:
            kubectl(job.kubeconfig, "cordon", node)
            cordoned.append(node)
        stayed = [name for name in pods if name != rank0]
        seen = {name: len(_rounds(logs[name])) for name in stayed}
        lost_at = time.monotonic()
        job.core.delete_namespaced_pod(rank0, job.namespace)
        if elastic:
            after = wait_for(lambda: _training(job, 2, rounds=seen, names=stayed), timeout=300,
                             what="two left at world 2", interval=0.2)
        else:
            after = wait_for(lambda: _training(job, 3, attempt=1), timeout=300, what="attempt 1 training",
                             interval=0.2)
        continues = time.monotonic() - lost_at
        redone = _redone(logs, after)
        seen = {name: len(_rounds(log)) for name, log in _logs_of(job, stayed).items()}
        kubectl(job.kubeconfig, "uncordon", cordoned.pop(0))
        back_at = time.monotonic()
        full = 0.0
        if elastic:
            wait_for(lambda: len(_pods(job)) == 3 and _training(job, 3, rounds=seen), timeout=300,
                     what="back at world 3", interval=0.2)
            full = time.monotonic() - back_at
        status = _status(job)
        return {"continues_s": round(continues, 2), "full_size_s": round(full, 2), "redone": redone,
                "restarts": status.get("restarts", 0) + status.get("uncountedRestarts", 0)}
    finally:
        for node in cordoned:
            kubectl(job.kubeconfig, "uncordon", node, check=False)
        job.delete()


def _logs_of(job: ExampleJob, names: list[str]) -> dict[str, str]:
    return {name: _log(job, name) for name in names}


def losses_in_a_row(cluster, folder: Path, losses: int, steps: int) -> dict:
    """One elastic job of `steps` steps, `losses` pods deleted one after the other (each back at world 3 before
    the next), then left to finish: Succeeded, one attempt, every resume within a checkpoint interval."""
    job = _start(cluster, folder, True, steps)
    try:
        redone, seconds = [], []
        for n in range(losses):
            pods = _pods(job)
            logs = {name: _log(job, name) for name in pods}
            last = _last_step(logs)
            if last > steps - 4 * EVERY:  # it would finish during the loss: what follows would measure nothing
                raise SystemExit(f"loss {n + 1}: the job is at step {last} of {steps}; run with more --row-steps")
            victim = sorted(pods)[n % len(pods)]
            rounds = {name: len(_rounds(log)) for name, log in logs.items() if name != victim}
            lost_at = time.monotonic()
            job.core.delete_namespaced_pod(victim, job.namespace)
            after = wait_for(lambda r=rounds: _training(job, 3, rounds=r) if len(_pods(job)) == 3 else None,
                             timeout=300, what=f"loss {n + 1}: back at world 3", interval=0.5)
            seconds.append(round(time.monotonic() - lost_at, 2))
            redone.append(_redone(logs, after))
        wait_for(lambda: _status(job).get("phase") == "Succeeded" or None, timeout=steps * 3,
                 what="the job Succeeded", interval=2)
        status = _status(job)
        assert (status["attempt"], status.get("restarts", 0), status.get("uncountedRestarts", 0)) == (0, 0, 0), status
        return {"losses": losses, "steps": steps, "redone": redone, "back_at_world_3_s": seconds,
                "phase": status["phase"], "attempt": status["attempt"], "resizes": status["elastic"]["resizes"],
                "every_resume_within_a_checkpoint": all(r <= EVERY for r in redone)}
    finally:
        job.delete()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--losses", type=int, default=10)
    parser.add_argument("--row-steps", type=int, default=400, help="the steps of the job that loses --losses pods")
    parser.add_argument("--only-losses", action="store_true",
                        help="only the losses in a row; the side-by-side trials kept from the last elastic.json")
    args = parser.parse_args()
    slot = RealClusterSlot()
    results: dict[str, list[dict]] = {side: [] for side in SIDES}
    try:
        cluster, _ = slot.operator()
        for n in range(0 if args.only_losses else args.trials):
            for side in SIDES:
                folder = realexample.write_manifests(cluster.registry, OUT.parent / f"elastic-{side}-{n}")
                result = trial(cluster, side, folder)
                print(f"trial {n} {side}: {result}", flush=True)
                results[side].append(result)
        endurance = losses_in_a_row(cluster, realexample.write_manifests(cluster.registry, OUT.parent / "elastic-row"),
                                    args.losses, args.row_steps) if args.losses else {}
        print(f"losses in a row: {endurance}", flush=True)
    finally:
        slot.release()
    if args.only_losses:
        return replace_losses(OUT, endurance)
    summary = summarize(results, median=("continues_s", "full_size_s", "redone", "restarts"),
                        most=("continues_s", "redone"))
    return write_results(OUT, args.trials, summary, results, in_a_row=endurance)


def replace_losses(out: Path, endurance: dict) -> int:
    """The last run's elastic.json with its losses in a row replaced, and the command that measured them."""
    data = json.loads(out.read_text())
    data["in_a_row"] = {**endurance, "command": run_command(out)}
    out.write_text(json.dumps(data, indent=2))
    print(json.dumps(data["in_a_row"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
