"""What the real-node benchmarks of the real example share (drain.py, in_place.py): the job started in a
namespace of its own, as a user applies it with one edit, and a wait for its ranks' training steps."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import argparse
import json
import statistics
from typing import TypeVar

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from localcluster.harness import realexample
from localcluster.harness.kube import allow_host_path, kubectl, new_namespace
from localcluster.harness.waiting import wait_for
from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from tests.support.realnodes import RealClusterSlot, attempt_logs, clients

Side = TypeVar("Side")

JOB = "real-train"
STEP = re.compile(r"^step=(\d+) rank=\d+ loss=", re.M)
EVERY = 5  # steps between periodic checkpoints


def steps(log: str) -> list[int]:
    return [int(s) for s in STEP.findall(log)]


@dataclass
class ExampleJob:
    """The real example running in `namespace` (deleted by the trial that started it)."""

    core: Any
    custom: Any
    kubeconfig: str
    namespace: str

    def past(self, attempt: int, step: int) -> dict[int, str] | None:
        """Both ranks' logs once each ran `attempt` past `step`; None before."""
        logs = attempt_logs(self.core, self.namespace, JOB, attempt)
        ranks = [steps(log) for log in logs.values()]
        return logs if len(logs) == 2 and all(s and s[-1] >= step for s in ranks) else None

    def pods(self) -> list[Any]:
        return self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items

    def status(self) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, JOB).get("status") or {}

    def delete(self) -> None:
        """The namespace deleted, and gone before the next trial starts."""
        self.core.delete_namespace(self.namespace)
        wait_for(lambda: self.namespace not in {n.metadata.name for n in self.core.list_namespace().items},
                 timeout=180, what=f"namespace {self.namespace} gone")


def start(cluster: Any, folder: Path, prefix: str, edit: Callable[[dict], None]) -> ExampleJob:
    """The example's manifests written into `folder`, its TrainingJob changed by `edit`, long training with a
    periodic checkpoint every EVERY steps, applied in a new namespace; returned once both ranks are 3 steps
    past a periodic checkpoint (2·EVERY + 3: one is mirrored for sure), where the trials strike."""
    core, custom = clients(cluster)
    kc = str(cluster.kubeconfig)
    namespace = new_namespace(core, prefix=prefix)
    job = ExampleJob(core, custom, kc, namespace)
    try:
        allow_host_path(core, namespace)
        manifest = yaml.safe_load((folder / "trainingjob.yaml").read_text())
        edit(manifest)
        realexample.set_env(manifest, TRAIN_STEPS="100000", CHECKPOINT_EVERY=str(EVERY))
        (folder / "trainingjob.yaml").write_text(yaml.safe_dump(manifest))
        kubectl(kc, "apply", "-n", namespace, "-f", str(folder))
        wait_for(lambda: job.past(0, 2 * EVERY + 3), timeout=600, what="attempt 0 training")
    except BaseException:
        job.delete()
        raise
    return job


def alternate(sides: dict[str, Side], trials: int, out: Path,
              trial: Callable[[Any, str, Side, Path], dict]) -> dict[str, list[dict]]:
    """`trials` rounds of every side, one after the other (side by side in one run), on the test session's
    real-node cluster with the operator installed: trial(cluster, operator namespace, side, manifests folder)."""
    slot = RealClusterSlot()
    results: dict[str, list[dict]] = {side: [] for side in sides}
    try:
        cluster, operator_namespace = slot.operator()
        for n in range(trials):
            for side, value in sides.items():
                folder = realexample.write_manifests(cluster.registry, out.parent / f"{out.stem}-{side}-{n}")
                result = trial(cluster, operator_namespace, value, folder)
                print(f"trial {n} {side}: {json.dumps(result)}", flush=True)
                results[side].append(result)
    finally:
        slot.release()
    return results


def trials_argument(doc: str | None) -> int:
    """--trials from the command line (default 3)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    return int(parser.parse_args().trials)


def run_command(out: Path) -> str:
    """The command line that ran the benchmark writing `out` (.cache/bench/<name>.json)."""
    return " ".join(["python -P", f"tools/bench/{out.stem}.py", *sys.argv[1:]])


def write_results(out: Path, trials: int, summary: dict, results: dict, **facts: Any) -> int:
    """`out` (.cache/bench/<name>.json, which tools/bench/report.py reads) written; the summary printed."""
    data = {"trials": trials, "checkpoint_every": EVERY, **facts, "summary": summary, "results": results,
            "command": run_command(out)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    print(json.dumps(summary, indent=2))
    return 0


def summarize(results: dict[str, list[dict]], *, median: tuple[str, ...] = (), most: tuple[str, ...] = (),
              every: tuple[str, ...] = ()) -> dict[str, dict]:
    """Per side: `<field>_median` and `<field>_max` over its trials, and whether `every` field held in all."""
    return {side: {**{f"{k}_median": statistics.median(r[k] for r in rs) for k in median},
                   **{f"{k}_max": max(r[k] for r in rs) for k in most},
                   **{k: all(r[k] for r in rs) for k in every}}
            for side, rs in results.items()}
