"""Metrics of the operator (Prometheus naming: units in names, _total for counters).

Jobs by phase, the work-queue depth and each job's goodput are computed when scraped, from the operator's
own state (for goodput: the status it last wrote), so they can never drift from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from multinode import __version__

# From seconds (small jobs on an idle cluster) to many minutes (1000 nodes, a busy scheduler).
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)



@dataclass(frozen=True)
class JobFigures:
    """One job's goodput, step and stragglers, as its status last said (the operator's controller fills these)."""

    namespace: str
    job: str
    productive_seconds: int
    lost_seconds: Mapping[str, int] = field(default_factory=dict)  # by cause
    step: int | None = None
    # Ranks reported as stragglers; None for a job without progress (no spec.hangDetection): no series.
    stragglers: int | None = None


class _StateCollector(Collector):
    def __init__(self, phases: Callable[[], Mapping[str, str]], queue_depth: Callable[[], int],
                 jobs: Callable[[], Iterable[JobFigures]]):
        self._phases, self._queue_depth, self._jobs = phases, queue_depth, jobs

    def collect(self) -> Iterator[Metric]:
        by_phase = GaugeMetricFamily("multinode_trainingjobs", "TrainingJobs by phase.", labels=["phase"])
        counts: dict[str, int] = {}
        for phase in self._phases().values():
            counts[phase] = counts.get(phase, 0) + 1
        for phase in ("Pending", "Starting", "Running", "Restarting", "Suspended", "Succeeded", "Failed"):
            by_phase.add_metric([phase], counts.get(phase, 0))
        yield by_phase
        yield GaugeMetricFamily("multinode_work_queue_depth", "Jobs waiting to be reconciled.",
                                value=self._queue_depth())
        yield from _job_families(list(self._jobs()))


def _job_families(jobs: list[JobFigures]) -> Iterator[Metric]:
    # Gauges, not counters: they copy status.goodput, which outlives this process (a counter would start
    # from 0 after an operator restart), and productive seconds go down when a restart turns the work
    # since the last checkpoint into lost (redone) seconds.
    goodput = GaugeMetricFamily("multinode_trainingjob_goodput_seconds",
                                "Seconds of a job's wall time: kind productive, or lost by cause (status.goodput).",
                                labels=["namespace", "job", "kind", "cause"])
    step = GaugeMetricFamily("multinode_trainingjob_step", "Latest training step of a job "
                             "(status.progress.step).", labels=["namespace", "job"])
    stragglers = GaugeMetricFamily("multinode_trainingjob_straggler_ranks", "Ranks reported as stragglers "
                                   "(slower than hangDetection.stragglers.factor for forSeconds).",
                                   labels=["namespace", "job"])
    for j in jobs:
        if j.stragglers is not None:
            stragglers.add_metric([j.namespace, j.job], j.stragglers)
        goodput.add_metric([j.namespace, j.job, "productive", ""], j.productive_seconds)
        for cause, seconds in sorted(j.lost_seconds.items()):
            goodput.add_metric([j.namespace, j.job, "lost", cause], seconds)
        if j.step is not None:
            step.add_metric([j.namespace, j.job], j.step)
    yield goodput
    yield step
    yield stragglers


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.pods_created = Counter("multinode_pods_created_total", "Node pods created.", registry=r)
        self.restarts = Counter("multinode_restarts_total", "Gang restarts, by failure reason.",
                                ["reason", "counted"], registry=r)
        self.reconcile_duration = Histogram("multinode_reconcile_duration_seconds", "Duration of one reconcile.",
                                            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                                            registry=r)
        self.job_pods_created = Histogram("multinode_job_pods_created_seconds",
                                          "From a job's creation to all pods of its first attempt created.",
                                          buckets=LATENCY_BUCKETS, registry=r)
        self.job_running = Histogram("multinode_job_running_seconds",
                                     "From a job's creation to its first Running phase.",
                                     buckets=LATENCY_BUCKETS, registry=r)
        self.leader = Gauge("multinode_leader", "1 while this replica acts (holds the leader election "
                            "Lease, or runs without leader election), 0 while it is a standby.", registry=r)
        self.api_errors = Counter("multinode_api_errors_total", "Failed Kubernetes API calls of the operator.",
                                  ["operation", "code"], registry=r)
        self.job_relists = Counter("multinode_job_relists_total", "Passes of the periodic re-list of TrainingJobs "
                                   "(controller/resync.py) that listed every followed namespace.", registry=r)
        # Above zero means watch events were lost and only the periodic re-list saw the job (controller/resync.py).
        self.jobs_found_by_resync = Counter(
            "multinode_jobs_found_by_resync_total", "TrainingJobs the periodic re-list found the operator had "
            "missed (reason Missing, Unreconciled or Deleted): each is a lost watch event.", ["reason"], registry=r)
        # Prometheus' build_info convention: a constant 1 whose label says which version is running.
        Gauge("multinode_build_info", "The operator's version (pyproject's), as a label; always 1.", ["version"],
              registry=r).labels(version=__version__).set(1)

    def watch_state(self, phases: Callable[[], Mapping[str, str]], queue_depth: Callable[[], int],
                    jobs: Callable[[], Iterable[JobFigures]] = lambda: ()) -> None:
        self.registry.register(_StateCollector(phases, queue_depth, jobs))

