"""Progress of an attempt's ranks, read from the trainers' logs: the records the planner sees (JobProgress in
Observed.progress), folding log lines into them, and status.progress.

Pure: the controller's prober (controller/progress_probe.py) fetches each rank's log with timestamps and
folds it at once (`fold_log`: the newest step and times, no text kept), then hands a sweep's folds to
`absorb_sweep`; everything about what counts as progress is decided here.

What counts as progress, per attempt:
- until any rank printed a heartbeat (multinode.progress), any new log line of a rank ("Logs");
- from then on, only a heartbeat whose step differs from that rank's last one ("Heartbeat"): a stuck
  collective's watchdog noise, or a heartbeat thread repeating one step, must not mask a hang.
A "rank" here is a node index (one pod); with several processes per node, the node's newest step counts.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.progress import ProgressSource, ProgressStatus
from multinode.api.status import ConditionStatus
from multinode.api.timestamps import rfc3339
from multinode.progress import Heartbeat, parse_heartbeat
from multinode.reconcile.decision import Decision, SetCondition


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
class RankRead:
    """What one sweep learned of a rank from its new log lines, folded while they were parsed (fold_log): a
    few fields whatever the log's size, so a sweep over many chatty ranks holds no log text. Both ways of
    counting progress are kept, because which one applies is known only once every rank is read (the first
    heartbeat of any rank switches the whole attempt to heartbeats)."""

    pod: str
    cursor: int | None  # the key of the newest new line; None: no new line
    first_line: datetime | None  # the oldest new line
    first_beat: datetime | None  # the oldest new heartbeat; None: no heartbeat
    plain: RankProgress  # the rank if every line counts as progress
    beats: RankProgress  # the rank if only a new step counts


@dataclass(frozen=True)
class AttemptLog:
    """The prober's memory of one attempt between sweeps."""

    attempt: int
    ranks: Mapping[int, RankProgress] = field(default_factory=dict)
    cursors: Mapping[str, int] = field(default_factory=dict)  # pod name → key of the newest line read
    first_progress: datetime | None = None
    heartbeats: bool = False

    def rank(self, index: int) -> RankProgress:
        """What is known of rank `index` so far (nothing, before its first read)."""
        return self.ranks.get(index) or RankProgress(index=index, node=None, step=None, last_progress=None)


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z ?(.*)$")


def log_lines(raw: str) -> Iterator[LogLine]:
    """Lines of a log read with timestamps=true (`<RFC3339Nano> <text>`), one at a time; lines without a stamp
    are skipped."""
    for row in io.StringIO(raw):
        m = _STAMP.match(row.rstrip("\r\n"))
        if m is None:
            continue
        # fromisoformat, not strptime: a tenth of the time, on up to a thousand lines per rank per sweep.
        seconds = datetime.fromisoformat(m.group(1)).replace(tzinfo=timezone.utc)
        nanos = int((m.group(2) or "0").ljust(9, "0"))
        when = seconds.replace(microsecond=nanos // 1000)
        yield LogLine(when, int(seconds.timestamp()) * 1_000_000_000 + nanos, m.group(3))


def _beat(rank: RankProgress, time: datetime, beat: Heartbeat) -> RankProgress:
    """Rank `rank` after a heartbeat at `time`: a new step is progress; the same step is alive, not progressing."""
    if beat.step == rank.step:
        return rank
    measured = None
    if rank.step is not None and rank.last_progress is not None and beat.step > rank.step:
        measured = (time - rank.last_progress).total_seconds() / (beat.step - rank.step)
    return replace(rank, step=beat.step, last_progress=time,
                   step_seconds=beat.step_seconds if beat.step_seconds is not None else measured,
                   samples_per_second=beat.samples_per_second)


def fold_log(raw: str, *, pod: str, node: str | None, after: int | None, before: RankProgress,
             marker: str) -> RankRead:
    """Rank `before`'s pod `pod` (on `node`) logged `raw` (read with timestamps=true): fold its lines newer than
    the key `after` into a RankRead as they are parsed, keeping none of them."""
    start = replace(before, node=node or before.node)
    beats, cursor = start, None
    first_line = last_line = first_beat = None
    for line in log_lines(raw):
        if after is not None and line.key <= after:
            continue  # read by an earlier sweep (sinceTime has whole seconds)
        cursor = line.key if cursor is None else max(cursor, line.key)
        first_line = line.time if first_line is None else min(first_line, line.time)
        last_line = line.time
        beat = parse_heartbeat(line.text, marker)
        if beat is not None:
            first_beat = line.time if first_beat is None else min(first_beat, line.time)
            beats = _beat(beats, line.time, beat)
    plain = start if last_line is None else replace(start, last_progress=last_line)
    return RankRead(pod, cursor, first_line, first_beat, plain, beats)


def absorb_sweep(log: AttemptLog, reads: Mapping[int, RankRead]) -> AttemptLog:
    """Fold one sweep's reads (rank index → what its new lines said) into the attempt's memory."""
    beat_times = [r.first_beat for r in reads.values() if r.first_beat is not None]
    line_times = [r.first_line for r in reads.values() if r.first_line is not None]
    heartbeats = log.heartbeats or bool(beat_times)
    first = log.first_progress
    if heartbeats and not log.heartbeats:
        first = min(beat_times)  # from now on only heartbeats count, from the first one
    elif first is None and line_times:
        first = min(line_times)
    ranks, cursors = dict(log.ranks), dict(log.cursors)
    for index, read in reads.items():
        ranks[index] = read.beats if heartbeats else read.plain
        if read.cursor is not None:
            cursors[read.pod] = max(cursors.get(read.pod, 0), read.cursor)
    return AttemptLog(log.attempt, ranks, cursors, first, heartbeats)


def job_progress(log: AttemptLog, readable: set[int], checked: datetime) -> JobProgress:
    ranks = tuple(r for i, r in sorted(log.ranks.items()) if i in readable)
    return JobProgress(log.attempt, ranks, log.first_progress, checked, heartbeats=log.heartbeats)


def report_progress(job: TrainingJob, status: TrainingJobStatus, progress: JobProgress | None,
                    running: set[int]) -> Decision:
    """status.progress and the Progressing condition for the current attempt (only with hangDetection)."""
    if job.spec.hang_detection is None:
        return Decision(status={"progress": None})
    if progress is None or progress.attempt != status.attempt:
        if status.progress is None or status.progress.attempt != status.attempt:
            return Decision(status={"progress": ProgressStatus(attempt=status.attempt)})
        return Decision()
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
    condition: ConditionStatus
    if report.last_progress_time is None:
        condition, reason, message = "Unknown", Reason.WAITING_FOR_PROGRESS, "no rank has made progress yet"
    else:
        step = f"step {report.step}, " if report.step is not None else ""
        condition, reason = "True", Reason.PROGRESS_SEEN
        message = f"{step}last progress {report.last_progress_time} ({report.source})"
    return Decision(status={"progress": report},
                    conditions=(SetCondition(ConditionType.PROGRESSING, condition, reason, message),))
