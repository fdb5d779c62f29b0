"""Goodput accounting: how much of the job's wall time trained, and where the rest went (status.goodput).

Called once per planning pass, after every policy, with the status the pass started from (`before`) and
the one it leaves. The seconds since `accountedUntil` are classified by the state `before` describes (the
state the job was in until this pass saw otherwise) and added to one counter; `accountedUntil` moves to
now. Re-planning on the same observations adds nothing (the interval is empty), and an operator that
restarts plans from the stored status, so it counts from the stored `accountedUntil`: nothing twice.

Seconds are whole: `accountedUntil` carries the status's whole-second time format, and only the whole
seconds after it are counted, so truncation never loses or repeats a second.

A pass that changes nothing the classification reads commits nothing until GOODPUT_COMMIT_SECONDS have
passed: a reconcile per pod event must not become a status write per pod event. That is safe because
every change of state commits, so an uncommitted interval has one state throughout; within training, the
split at the first progress is by its timestamp, not by when it was seen.

A restart takes back what the failed attempt produced that the next one repeats: the work since the
latest mirrored checkpoint (redone) and, for a Hung restart, the time since the last progress (hang).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from multinode.api import Phase, TrainingJobStatus
from multinode.api.base import deep_copied
from multinode.api.conditions import ConditionType, Reason
from multinode.api.goodput import GoodputStatus, LostCause
from multinode.api.progress import ProgressStatus
from multinode.api.status import TERMINAL_PHASES, RestartRecord
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.conditions import find_condition
from multinode.reconcile.decision import Decision

# An unchanged state is committed (and so written to the status) at most this often.
GOODPUT_COMMIT_SECONDS = 60
# While the clock runs, the job is reconciled at least this often, so its figures (and their metrics) are
# never older than this even when nothing else happens to it.
GOODPUT_REFRESH_SECONDS = 600.0


class Clock(Enum):
    """What the job is doing, for the clock."""

    STOPPED = "stopped"  # not started, suspended, finished, or holding open for the final sync
    SCHEDULING = LostCause.SCHEDULING.value
    STARTUP = LostCause.STARTUP.value
    RESTART = LostCause.RESTART.value
    TRAINING = "training"


_BY_PHASE = {Phase.PENDING: Clock.SCHEDULING, Phase.STARTING: Clock.STARTUP, Phase.RESTARTING: Clock.RESTART,
             Phase.RUNNING: Clock.TRAINING}


def clock(status: TrainingJobStatus) -> Clock:
    """The state a status describes, as the clock sees it."""
    if status.start_time is None or status.phase is None or status.phase in TERMINAL_PHASES:
        return Clock.STOPPED
    running = find_condition(status.conditions, ConditionType.RUNNING)
    if running is not None and running.reason == Reason.FINAL_SYNC:
        return Clock.STOPPED  # training ended; the job only waits for the mirror
    if running is not None and running.reason == Reason.BELOW_MIN_NODES:
        return Clock.SCHEDULING  # an elastic job's nodes left wait for capacity: not training
    return _BY_PHASE.get(status.phase, Clock.STOPPED)


def account(before: TrainingJobStatus, status: TrainingJobStatus, now: datetime) -> Decision:
    """status.goodput advanced from `before` to `now` (`status`: what this pass decided), and, while the clock
    runs, a timer to come back."""
    was, is_ = clock(before), clock(status)
    if was == Clock.STOPPED and is_ == Clock.STOPPED:
        return Decision()
    come_back = None if is_ == Clock.STOPPED else GOODPUT_REFRESH_SECONDS
    until = parse_time(rfc3339(now), now)  # whole seconds
    goodput = deep_copied(before.goodput or GoodputStatus())
    since = parse_time(goodput.accounted_until, now) if goodput.accounted_until else None
    # A clock behind the one that wrote accountedUntil (another operator's) never moves it back.
    if since is not None and since > until:
        until = since
    seconds = int((until - since).total_seconds()) if since is not None and was != Clock.STOPPED else 0
    new_attempt = status.attempt != before.attempt
    # Each interval has one count of spares, and one size, throughout.
    spares_changed = _spares(before) != _spares(status) or _reduced(before) != _reduced(status)
    if not (was != is_ or new_attempt or spares_changed or since is None or seconds >= GOODPUT_COMMIT_SECONDS):
        return Decision(requeue_after=come_back)  # status.goodput stays the copy of before's: nothing to write
    if seconds and since is not None:
        _credit(goodput, was, since, until, _attempt_progress(before, status, now))
        goodput.spare_seconds += seconds * _spares(before)
        if was == Clock.TRAINING and _reduced(before):
            goodput.reduced_seconds += seconds
    if new_attempt:
        record = _restart_record(before, status)
        if record is not None:
            _take_back(goodput, record, before.progress, status, until)
        goodput.attempt_productive_seconds = 0
    goodput.accounted_until = rfc3339(until)
    _totals(goodput)
    return Decision(status={"goodput": goodput}, requeue_after=come_back)


def _spares(status: TrainingJobStatus) -> int:
    """The hot spares a status counts (waiting: warm or starting)."""
    return status.spares.warm + status.spares.starting if status.spares else 0


def _reduced(status: TrainingJobStatus) -> bool:
    """Whether an elastic job trains without some of its nodes (status.elastic.shed)."""
    return bool(status.elastic and status.elastic.shed)


def _credit(goodput: GoodputStatus, was: Clock, since: datetime, until: datetime,
            progress: tuple[ProgressStatus | None, datetime | None]) -> None:
    """Add [since, until] to the counter of the state the job was in."""
    seconds = int((until - since).total_seconds())
    if was != Clock.TRAINING:
        cause = LostCause(was.value)
        setattr(goodput.lost, cause.value, goodput.lost.get(cause) + seconds)
        return
    reported, first = progress
    # status.progress exists only when the job has a progress source (spec.hangDetection), from the
    # attempt's start: until its first progress the job is still starting (rendezvous, loading).
    if reported is not None and first is None:
        goodput.lost.startup += seconds
        return
    warmup = 0
    if first is not None:
        warmup = min(seconds, max(0, int((first - since).total_seconds())))
    goodput.lost.startup += warmup
    goodput.productive_seconds += seconds - warmup
    goodput.attempt_productive_seconds += seconds - warmup


def _attempt_progress(before: TrainingJobStatus, status: TrainingJobStatus,
                      now: datetime) -> tuple[ProgressStatus | None, datetime | None]:
    """The progress of the attempt the interval belongs to (`before`'s), and its first progress time.

    This pass's copy is fresher, unless this pass began another attempt. A first progress older than the
    attempt's pods is a previous attempt's, not yet reset.
    """
    progress = status.progress if status.attempt == before.attempt and status.progress else before.progress
    if progress is None or not progress.first_progress_time:
        return progress, None
    first = parse_time(progress.first_progress_time, now)
    started = before.attempt_start_time or status.attempt_start_time
    if started is not None and first < parse_time(started, now):
        return progress, None
    return progress, first


def _restart_record(before: TrainingJobStatus, status: TrainingJobStatus) -> RestartRecord | None:
    """The record of the restart this pass made, if it made one (resuming after suspend makes none)."""
    if status.attempt > before.attempt and status.restart_history:
        record = status.restart_history[-1]
        if record.attempt == before.attempt:
            return record
    return None


def _take_back(goodput: GoodputStatus, record: RestartRecord, progress: ProgressStatus | None,
               status: TrainingJobStatus, failed_at: datetime) -> None:
    """Move what the failed attempt produced but the next repeats from productive to hang and redone."""
    owed = goodput.attempt_productive_seconds
    hang = 0
    if record.reason == Reason.HUNG and progress is not None and progress.last_progress_time:
        last = parse_time(progress.last_progress_time, failed_at)
        hang = min(owed, max(0, int((failed_at - last).total_seconds())))
    redone = owed - hang
    latest = status.checkpoints.latest if status.checkpoints else None
    if latest is not None:
        # The next attempt resumes from the mirrored copy, so work counts as kept from when it was mirrored.
        kept_at = parse_time(latest.mirrored_at, failed_at)
        worked_until = int((failed_at - kept_at).total_seconds()) - hang
        redone = min(redone, max(0, worked_until))
    goodput.lost.hang += hang
    goodput.lost.redone += redone
    goodput.productive_seconds = max(0, goodput.productive_seconds - hang - redone)


def _totals(goodput: GoodputStatus) -> None:
    goodput.lost_seconds = sum(goodput.lost.get(cause) for cause in LostCause)
    total = goodput.productive_seconds + goodput.lost_seconds
    goodput.percent = goodput.productive_seconds * 100 // total if total else None
