"""Progress of an attempt's ranks, read from the trainers' logs: the records the planner sees (JobProgress in
Observed.progress), folding log lines into them, and status.progress.

Pure: the controller's prober (controller/progress_probe.py) fetches log lines with their timestamps and
hands them to `absorb_sweep`; everything about what counts as progress is decided here.

What counts as progress, per attempt:
- until any rank printed a heartbeat (multinode.progress), any new log line of a rank ("Logs");
- from then on, only a heartbeat whose step differs from that rank's last one ("Heartbeat"): a stuck
  collective's watchdog noise, or a heartbeat thread repeating one step, must not mask a hang.
A "rank" here is a node index (one pod); with several processes per node, the node's newest step counts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.progress import ProgressSource, ProgressStatus
from multinode.api.status import ConditionStatus
from multinode.api.timestamps import rfc3339
from multinode.progress import parse_heartbeat
from multinode.reconcile.conditions import set_condition


@dataclass(frozen=True)
class RankProgress:
    index: int
    node: str | None
    step: int | None  # the last heartbeat step; None until a heartbeat
    last_progress: datetime | None  # None: no progress seen in this attempt
    step_seconds: float | None = None  # reported in the heartbeat, else measured between two heartbeats
    samples_per_second: float | None = None


@dataclass(frozen=True)
class JobProgress:
    attempt: int
    # Ranks whose logs were read in the last sweep; a rank whose read failed is left out (no verdict on it).
    ranks: tuple[RankProgress, ...]
    first_progress: datetime | None
    # When the logs behind this were read: silence is measured up to here, not up to the planner's clock.
    checked: datetime | None = None
    # A heartbeat was seen in this attempt (by any rank, readable now or not: finished ranks are not read).
    heartbeats: bool = False

    @property
    def source(self) -> ProgressSource:
        beats = self.heartbeats or any(r.step is not None for r in self.ranks)
        return ProgressSource.HEARTBEAT if beats else ProgressSource.LOGS


@dataclass(frozen=True)
class LogLine:
    time: datetime
    key: int  # nanoseconds since the epoch: orders lines and remembers where a pod's log was read up to
    text: str


@dataclass(frozen=True)
class PodRead:
    """What one sweep read of a rank's pod: its lines since the last read (oldest first)."""

    pod: str
    node: str | None
    lines: Sequence[LogLine]


@dataclass(frozen=True)
class AttemptLog:
    """The prober's memory of one attempt between sweeps."""

    attempt: int
    ranks: Mapping[int, RankProgress] = field(default_factory=dict)
    cursors: Mapping[str, int] = field(default_factory=dict)  # pod name → key of the newest line read
    first_progress: datetime | None = None
    heartbeats: bool = False


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z ?(.*)$")


def parse_log(raw: str) -> list[LogLine]:
    """Lines of a log read with timestamps=true (`<RFC3339Nano> <text>`); lines without a stamp are skipped."""
    lines = []
    for row in raw.splitlines():
        m = _STAMP.match(row)
        if m is None:
            continue
        seconds = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
        nanos = int((m.group(2) or "0").ljust(9, "0"))
        when = seconds.replace(microsecond=nanos // 1000)
        lines.append(LogLine(when, int(seconds.timestamp()) * 1_000_000_000 + nanos, m.group(3)))
    return lines


def _absorb(rank: RankProgress, lines: Sequence[LogLine], marker: str, heartbeats_only: bool) -> RankProgress:
    for line in lines:
        beat = parse_heartbeat(line.text, marker)
        if beat is None:
            if not heartbeats_only:
                rank = replace(rank, last_progress=line.time)
            continue
        if beat.step == rank.step:
            continue  # alive, not progressing
        measured = None
        if rank.step is not None and rank.last_progress is not None and beat.step > rank.step:
            measured = (line.time - rank.last_progress).total_seconds() / (beat.step - rank.step)
        rank = replace(rank, step=beat.step, last_progress=line.time,
                       step_seconds=beat.step_seconds if beat.step_seconds is not None else measured,
                       samples_per_second=beat.samples_per_second)
    return rank


def absorb_sweep(log: AttemptLog, reads: Mapping[int, PodRead], marker: str) -> AttemptLog:
    """Fold one sweep's reads (rank index → its new lines) into the attempt's memory."""
    new = [line for read in reads.values() for line in read.lines]
    beats = [line for line in new if parse_heartbeat(line.text, marker) is not None]
    heartbeats = log.heartbeats or bool(beats)
    first = log.first_progress
    if heartbeats and not log.heartbeats:
        first = min(line.time for line in beats)  # from now on only heartbeats count, from the first one
    elif first is None and new:
        first = min(line.time for line in new)
    ranks, cursors = dict(log.ranks), dict(log.cursors)
    for index, read in reads.items():
        before = ranks.get(index) or RankProgress(index=index, node=read.node, step=None, last_progress=None)
        ranks[index] = _absorb(replace(before, node=read.node or before.node), read.lines, marker, heartbeats)
        if read.lines:
            cursors[read.pod] = max(cursors.get(read.pod, 0), read.lines[-1].key)
    return AttemptLog(log.attempt, ranks, cursors, first, heartbeats)


def job_progress(log: AttemptLog, readable: set[int], checked: datetime) -> JobProgress:
    ranks = tuple(r for i, r in sorted(log.ranks.items()) if i in readable)
    return JobProgress(log.attempt, ranks, log.first_progress, checked, heartbeats=log.heartbeats)


def report_progress(job: TrainingJob, status: TrainingJobStatus, progress: JobProgress | None,
                    running: set[int], now: datetime) -> None:
    """status.progress and the Progressing condition for the current attempt (only with hangDetection)."""
    if job.spec.hang_detection is None:
        status.progress = None
        return
    if progress is None or progress.attempt != status.attempt:
        if status.progress is None or status.progress.attempt != status.attempt:
            status.progress = ProgressStatus(attempt=status.attempt)
        return
    ranks = [r for r in progress.ranks if r.index in running]
    steps = [r.step for r in ranks if r.step is not None]
    last = max((r.last_progress for r in ranks if r.last_progress is not None), default=None)
    current = status.progress if status.progress and status.progress.attempt == status.attempt else None
    report = current.model_copy() if current else ProgressStatus(attempt=status.attempt)
    report.step = min(steps) if steps else report.step
    report.last_progress_time = rfc3339(last) if last else report.last_progress_time
    source = progress.source if progress.first_progress else None
    # The status keeps the first progress across operator restarts (a restarted prober reads only the
    # logs' tails); it moves only when heartbeats take over from plain lines.
    if report.first_progress_time is None or source != report.source:
        report.first_progress_time = rfc3339(progress.first_progress) if progress.first_progress else None
    report.source = source
    status.progress = report
    condition: ConditionStatus
    if report.last_progress_time is None:
        condition, reason, message = "Unknown", Reason.WAITING_FOR_PROGRESS, "no rank has made progress yet"
    else:
        step = f"step {report.step}, " if report.step is not None else ""
        condition, reason = "True", Reason.PROGRESS_SEEN
        message = f"{step}last progress {report.last_progress_time} ({report.source})"
    set_condition(status.conditions, ConditionType.PROGRESSING, condition, reason, message, now=rfc3339(now),
                  generation=job.metadata.generation)
