"""Metrics of one job's checkpoint mirror, served on its metrics port."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class MirrorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, not_ready_reasons: Iterable[str] = ()):
        """`not_ready_reasons`: every reason code a checkpoint may be not ready for (the mirror passes
        multinode.checkpoints.NotReady; metrics import no other layer), each exported from the start."""
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.bytes_copied = Counter("multinode_mirror_copied_bytes_total", "Bytes copied into the checkpoint volume.",
                                    registry=r)
        self.bytes_linked = Counter("multinode_mirror_linked_bytes_total",
                                    "Bytes deduplicated by reflink or hard link instead of copied.", registry=r)
        self.checkpoints = Counter("multinode_mirror_checkpoints_total", "Checkpoints published.", registry=r)
        self.pruned = Counter("multinode_mirror_pruned_checkpoints_total", "Checkpoints removed by retention.",
                              registry=r)
        self.problems = Counter("multinode_mirror_problems_total", "Problems by reason.", ["reason"], registry=r)
        self.pass_duration = Histogram("multinode_mirror_pass_duration_seconds", "Duration of one mirror pass.",
                                       buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600), registry=r)
        self.lag = Histogram("multinode_mirror_lag_seconds",
                             "Time from a checkpoint becoming complete to it being published.",
                             buckets=(1, 5, 15, 30, 60, 120, 300, 900, 3600), registry=r)
        self.latest_step = Gauge("multinode_mirror_latest_checkpoint_step", "Step of the newest published checkpoint.",
                                 registry=r)
        # Labelled by reason code only (a fixed set), never by directory name: the label set stays bounded.
        self.not_ready = Gauge("multinode_mirror_not_ready_checkpoints",
                               "Checkpoint directories in the cache not complete yet, by reason.", ["reason"],
                               registry=r)
        # When the mirror last finished a pass, and last moved at all (a pass ended, a file staged), as Unix
        # times; with the interval, an alert tells a mirror that went silent (docs/operations.md).
        self.last_pass = Gauge("multinode_mirror_last_pass_timestamp_seconds", "When the last pass ended.",
                               registry=r)
        self.last_progress = Gauge("multinode_mirror_last_progress_timestamp_seconds",
                                   "When the mirror last made progress: a pass ended, a checkpoint was scanned or "
                                   "a file staged.", registry=r)
        self.interval = Gauge("multinode_mirror_interval_seconds", "Seconds the mirror rests between passes.",
                              registry=r)
        self._not_ready_reasons = set(not_ready_reasons)
        for reason in self._not_ready_reasons:
            self.not_ready.labels(reason=reason).set(0)

    def progressed(self) -> None:
        self.last_progress.set_to_current_time()

    def record(self, report) -> None:
        """Account one SyncReport of multinode.checkpoints (a pass that just ended)."""
        self.last_pass.set_to_current_time()
        self.last_progress.set_to_current_time()
        self.bytes_copied.inc(report.bytes_copied)
        self.bytes_linked.inc(report.bytes_linked)
        self.checkpoints.inc(len(report.mirrored))
        self.pruned.inc(len(report.pruned))
        self.pass_duration.observe(report.seconds)
        for lag in report.lag_seconds:
            self.lag.observe(lag)
        for problem in report.problems:
            self.problems.labels(reason=problem.reason).inc()
        if report.latest is not None and report.latest.step is not None:
            self.latest_step.set(report.latest.step)
        if report.scanned:
            counts = Tally(str(c.reason) for c in report.incomplete)
            self._not_ready_reasons.update(counts)   # a code the caller did not name is still counted
            for reason in self._not_ready_reasons:
                self.not_ready.labels(reason=reason).set(counts[reason])
