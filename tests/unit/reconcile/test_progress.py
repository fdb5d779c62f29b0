"""Folding trainers' log lines into per-rank progress, and status.progress."""

from __future__ import annotations

import pytest

from multinode.api import TrainingJobStatus
from multinode.api.progress import ProgressStatus
from multinode.reconcile.decision import Decision
from multinode.reconcile.progress import JobProgress, RankProgress, report_progress
from datetime import datetime, timedelta, timezone

from multinode.api.constants import PROGRESS_MARKER
from multinode.reconcile.progress import AttemptLog, absorb_sweep, fold_log, job_progress, log_lines
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job

T0 = datetime(2026, 11, 20, 12, 0, 0, tzinfo=timezone.utc)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def beat(seconds: float, step: int, extra: str = "") -> str:
    return f"{stamp(seconds)} {PROGRESS_MARKER} step={step}{extra}"


def sweep(log: AttemptLog, rows: dict[int, list[str]], after: dict[int, int] | None = None) -> AttemptLog:
    """One sweep: each rank's rows folded as the prober folds a log it read, then absorbed."""
    reads = {i: fold_log("\n".join(r), pod=f"llama-{i}-a0", node=f"node-{i}", after=(after or {}).get(i),
                         before=log.rank(i), marker=PROGRESS_MARKER) for i, r in rows.items()}
    return absorb_sweep(log, reads)


def test_log_lines_carry_their_timestamps_to_the_nanosecond() -> None:
    lines = list(log_lines("2026-11-20T12:00:01.123456789Z hello world\n2026-11-20T12:00:02Z\nno stamp here\n"))
    assert [(line.time, line.text) for line in lines] == [
        (T0.replace(second=1, microsecond=123456), "hello world"), (T0.replace(second=2), "")]
    assert lines[0].key == int(T0.timestamp() + 1) * 10**9 + 123456789


def test_without_heartbeats_any_line_is_progress() -> None:
    log = sweep(AttemptLog(0), {0: [f"{stamp(1)} loss=1", f"{stamp(3)} loss=0.5"], 1: []})
    progress = job_progress(log, {0, 1}, T0 + timedelta(seconds=5))
    assert progress.source == "Logs" and progress.first_progress == T0 + timedelta(seconds=1)
    assert [(r.index, r.step, r.last_progress) for r in progress.ranks] == [
        (0, None, T0 + timedelta(seconds=3)), (1, None, None)]
    assert log.cursors == {"llama-0-a0": next(log_lines(f"{stamp(3)} x")).key}


def test_once_a_heartbeat_is_seen_only_new_steps_count() -> None:
    log = sweep(AttemptLog(0), {0: [f"{stamp(1)} starting", beat(2, 1), beat(4, 2)]})
    assert log.heartbeats and log.first_progress == T0 + timedelta(seconds=2)  # the first heartbeat
    rank = log.ranks[0]
    assert (rank.step, rank.last_progress, rank.step_seconds) == (2, T0 + timedelta(seconds=4), 2.0)  # measured
    # A stuck collective's noise and a repeated step are alive, not progress.
    log = sweep(log, {0: [f"{stamp(10)} NCCL watchdog: waiting", beat(11, 2)]})
    assert log.ranks[0].last_progress == T0 + timedelta(seconds=4)
    log = sweep(log, {0: [beat(12, 3, " step_seconds=0.5 samples_per_second=64")]})
    rank = log.ranks[0]
    assert (rank.step, rank.step_seconds, rank.samples_per_second) == (3, 0.5, 64.0)  # reported beats measured


def test_the_first_heartbeat_of_any_rank_makes_only_steps_count_for_every_rank_of_that_sweep() -> None:
    """Each log is folded alone, before the sweep knows whether another rank printed a heartbeat: the fold keeps
    both counts, and the sweep picks one for all ranks."""
    log = sweep(AttemptLog(0), {0: [f"{stamp(5)} loss=1"], 1: [f"{stamp(2)} loading", beat(3, 1)]})
    assert log.heartbeats and log.first_progress == T0 + timedelta(seconds=3)
    assert (log.ranks[0].step, log.ranks[0].last_progress, log.ranks[0].node) == (None, None, "node-0")
    assert (log.ranks[1].step, log.ranks[1].last_progress) == (1, T0 + timedelta(seconds=3))


def test_a_fold_skips_lines_read_before_and_keeps_only_the_newest_step() -> None:
    rows = [beat(1, 1), beat(2, 2), f"{stamp(3)} " + "x" * 4096, beat(4, 3)]
    read = fold_log("\n".join(rows), pod="llama-0-a0", node="n", after=next(log_lines(beat(1, 1))).key,
                    before=AttemptLog(0).rank(0), marker=PROGRESS_MARKER)
    assert (read.first_line, read.first_beat) == (T0 + timedelta(seconds=2), T0 + timedelta(seconds=2))
    assert (read.beats.step, read.beats.last_progress, read.beats.step_seconds) == (3, T0 + timedelta(seconds=4), 2.0)
    assert read.plain.last_progress == T0 + timedelta(seconds=4)
    assert read.cursor == next(log_lines(beat(4, 3))).key
    assert not any(isinstance(value, str) and len(value) > 64 for value in vars(read).values())  # no text kept


def test_unreadable_ranks_are_left_out_and_a_new_attempt_starts_afresh() -> None:
    log = sweep(AttemptLog(0), {0: [beat(1, 1)], 1: [beat(1, 1)]})
    assert [r.index for r in job_progress(log, {1}, T0).ranks] == [1]
    assert job_progress(AttemptLog(1), set(), T0).first_progress is None


def test_status_progress_reports_the_lowest_step_and_the_newest_progress() -> None:
    job = stored_job(2, hangDetection={"timeoutSeconds": 60})
    log = sweep(AttemptLog(0), {0: [beat(1, 10)], 1: [beat(2, 9)]})
    pods = [pod(0, started_at="2026-11-20T11:59:00Z"), pod(1, started_at="2026-11-20T11:59:00Z")]
    result = run(job, pods, progress=job_progress(log, {0, 1}, NOW + timedelta(seconds=3)),
                 now=NOW + timedelta(seconds=3))
    report = result.status.progress
    assert (report.attempt, report.step, report.source) == (0, 9, "Heartbeat")
    assert (report.last_progress_time, report.first_progress_time) == ("2026-11-20T12:00:02Z", "2026-11-20T12:00:01Z")
    assert condition(result.status, "Progressing").reason == "ProgressSeen"
    # Before any progress: Unknown; without hangDetection: no progress status at all.
    waiting = run(job, pods, progress=job_progress(AttemptLog(0), {0, 1}, NOW))
    assert condition(waiting.status, "Progressing").status == "Unknown"
    assert run(stored_job(2), pods).status.progress is None


def test_the_first_progress_survives_an_operator_restart_and_moves_when_heartbeats_take_over() -> None:
    job = stored_job(2, hangDetection={"timeoutSeconds": 60})
    pods = [pod(0, started_at="2026-11-20T11:59:00Z"), pod(1, started_at="2026-11-20T11:59:00Z")]
    plain = sweep(AttemptLog(0), {0: [f"{stamp(1)} loading"]})
    first = run(job, pods, progress=job_progress(plain, {0, 1}, NOW))
    assert first.status.progress.first_progress_time == "2026-11-20T12:00:01Z"
    # A restarted operator's prober only sees the logs' tails: a later first line.
    restarted = sweep(AttemptLog(0), {0: [f"{stamp(30)} training"]})
    again = run(job, pods, previous=first.status, progress=job_progress(restarted, {0, 1}, NOW))
    assert again.status.progress.first_progress_time == "2026-11-20T12:00:01Z"
    beats = sweep(restarted, {0: [beat(40, 1)]})
    later = run(job, pods, previous=again.status, progress=job_progress(beats, {0, 1}, NOW))
    assert (later.status.progress.first_progress_time, later.status.progress.source) == ("2026-11-20T12:00:40Z",
                                                                                         "Heartbeat")


def test_the_source_stays_heartbeat_when_no_rank_is_read_any_more() -> None:
    # Finished ranks are not read: an empty sweep at the end must not turn the source back to Logs.
    log = sweep(AttemptLog(0), {0: [beat(1, 1)]})
    assert job_progress(log, set(), NOW).source == "Heartbeat"
    job = stored_job(2, hangDetection={"timeoutSeconds": 60})
    done = [pod(0, "Succeeded"), pod(1, "Succeeded")]
    running = run(job, [pod(0, started_at="2026-11-20T11:59:00Z"), pod(1, started_at="2026-11-20T11:59:00Z")],
                  progress=job_progress(log, {0, 1}, NOW))
    finished = run(job, done, previous=running.status, progress=job_progress(log, set(), NOW))
    assert (finished.status.progress.source, finished.status.progress.step) == ("Heartbeat", 1)


# The policy called directly.

WATCHED = stored_job(2, hangDetection={"timeoutSeconds": 60})
SEEN = JobProgress(0, (RankProgress(0, "n0", 10, NOW), RankProgress(1, "n1", 9, NOW - timedelta(seconds=5))),
                   NOW - timedelta(seconds=60), NOW, heartbeats=True)


@pytest.mark.parametrize(("job", "status", "progress", "running", "step", "condition_"), [
    (stored_job(2), TrainingJobStatus(progress=ProgressStatus(attempt=0)), SEEN, {0, 1}, "gone", None),
    (WATCHED, TrainingJobStatus(), None, {0, 1}, None, None),                          # a fresh report, no words
    (WATCHED, TrainingJobStatus(attempt=1, progress=ProgressStatus(attempt=1, step=4)), SEEN, {0, 1}, "kept", None),
    (WATCHED, TrainingJobStatus(), SEEN, {0, 1}, 9, ("True", "ProgressSeen")),         # the lowest step
    (WATCHED, TrainingJobStatus(), SEEN, {0}, 10, ("True", "ProgressSeen")),           # only running ranks count
    (WATCHED, TrainingJobStatus(), JobProgress(0, (RankProgress(0, "n0", None, None),), None, NOW), {0}, None,
     ("Unknown", "WaitingForProgress")),
])
def test_status_progress_and_the_progressing_condition(job, status, progress, running, step, condition_) -> None:
    decided = report_progress(job, status, progress, running)
    if step == "gone":
        assert decided == Decision(status={"progress": None})
        return
    if step == "kept":
        assert decided == Decision()
        return
    report = decided.status["progress"]
    assert report.attempt == status.attempt and report.step == step
    assert [(c.status, c.reason) for c in decided.conditions] == ([condition_] if condition_ else [])
