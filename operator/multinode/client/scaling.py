"""Scaling test: the same job at several node counts, throughput from the trainers' heartbeat lines.

The heartbeat line: any log line with `step=<int>` and `samples_per_second=<number>` as key=value words,
e.g. `multinode heartbeat step=120 samples_per_second=812.5` (more keys may follow). A rank's throughput
is the median of its heartbeats after the first (warm-up: compilation, the first NCCL connections); the
job's is the sum over the ranks that print heartbeats, so a trainer that reports the global figure from
rank 0 only is read right too.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# The analysis is pure and the `multinode` command imports it at start: the client (and the Kubernetes
# library under it) is imported when a test runs.
if TYPE_CHECKING:
    from multinode.api import TrainingJob
    from multinode.client.jobs import TrainingJobClient
    from multinode.client.logs import LogLine

DEFAULT_TARGET = 0.8
_STEP = re.compile(r"(?:^|\s)step=(\d+)(?:\s|$)")
_RATE = re.compile(r"(?:^|\s)samples_per_second=([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)(?:\s|$)")


@dataclass(frozen=True)
class Heartbeat:
    step: int
    samples_per_second: float


def parse_heartbeat(text: str) -> Heartbeat | None:
    step, rate = _STEP.search(text), _RATE.search(text)
    if not step or not rate:
        return None
    return Heartbeat(int(step.group(1)), float(rate.group(1)))


def job_throughput(lines: Iterable[LogLine]) -> tuple[float, int]:
    """(samples per second of the job, heartbeats read)."""
    per_rank: dict[int, list[float]] = {}
    for line in lines:
        beat = parse_heartbeat(line.text)
        if beat is not None:
            per_rank.setdefault(line.rank, []).append(beat.samples_per_second)
    total, count = 0.0, 0
    for rates in per_rank.values():
        count += len(rates)
        total += statistics.median(rates[1:] if len(rates) > 1 else rates)
    return total, count


@dataclass(frozen=True)
class SizeResult:
    nodes: int
    throughput: float
    heartbeats: int
    speedup: float = 1.0
    efficiency: float = 1.0


@dataclass(frozen=True)
class ScalingReport:
    results: list[SizeResult]
    target: float

    @property
    def passed(self) -> bool:
        return all(r.efficiency >= self.target for r in self.results)

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "verdict": "PASS" if self.passed else "FAIL",
                "sizes": [vars(r) for r in self.results]}


def analyse(measured: dict[int, tuple[float, int]], target: float = DEFAULT_TARGET) -> ScalingReport:
    """Speedup and efficiency against linear scaling from the smallest size: efficiency(N) =
    throughput(N) / (throughput(base) * N / base)."""
    sizes = sorted(measured)
    base_nodes = sizes[0]
    base = measured[base_nodes][0]
    results = []
    for n in sizes:
        throughput, beats = measured[n]
        speedup = throughput / base if base > 0 else 0.0
        ideal = n / base_nodes
        results.append(SizeResult(n, throughput, beats, speedup, speedup / ideal if ideal else 0.0))
    return ScalingReport(results, target)


def sized(job: dict[str, Any], nodes: int) -> dict[str, Any]:
    """The job at `nodes` nodes, named `<name>-n<nodes>` (the spec is immutable: each size is a new job)."""
    from multinode.client.jobs import job_body

    body = job_body(job)
    body["metadata"] = {**body.get("metadata", {}), "name": f"{body['metadata']['name']}-n{nodes}"}
    body["spec"] = {**body["spec"], "numNodes": nodes}
    return body


def run_scaling_test(jobs: TrainingJobClient, job: dict[str, Any], sizes: Iterable[int], *, target: float,
                     timeout: float, keep: bool = False,
                     progress: Callable[[str], None] = lambda message: None) -> ScalingReport:
    """Each size in turn: create, wait for Succeeded, read every rank's heartbeats, delete (unless `keep`)."""
    measured: dict[int, tuple[float, int]] = {}
    for nodes in sorted(set(sizes)):
        body = sized(job, nodes)
        name = body["metadata"]["name"]
        progress(f"{name}: creating ({nodes} node{'s' if nodes > 1 else ''})")
        jobs.create(body)

        def phase(job: TrainingJob, name: str = name) -> None:
            if job.status and job.status.phase:  # the operator's first status write; before it, nothing to say
                progress(f"{name}: {job.status.phase.value}")

        try:
            jobs.wait(name, phases=("Succeeded",), timeout=timeout, on_progress=phase)
            throughput, beats = job_throughput(jobs.logs(name, max_streams=0))
        finally:
            if not keep:
                jobs.delete(name, wait=True)
        if beats == 0:
            raise ValueError(f"{name}: no heartbeat lines (step=N samples_per_second=X) in the trainers' logs")
        progress(f"{name}: {throughput:.1f} samples/s from {beats} heartbeats")
        measured[nodes] = (throughput, beats)
    return analyse(measured, target)
