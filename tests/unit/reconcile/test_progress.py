"""Folding trainers' log lines into per-rank progress, and status.progress."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from multinode.api.constants import PROGRESS_MARKER
from multinode.reconcile.progress import AttemptLog, PodRead, absorb_sweep, job_progress, parse_log
from tests.unit.reconcile.planning import NOW, condition, pod, run
from localcluster.harness.trainingjobs import stored_job

T0 = datetime(2026, 11, 20, 12, 0, 0, tzinfo=timezone.utc)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def beat(seconds: float, step: int, extra: str = "") -> str:
    return f"{stamp(seconds)} {PROGRESS_MARKER} step={step}{extra}"


def read(index: int, *rows: str) -> PodRead:
    return PodRead(f"llama-{index}-a0", f"node-{index}", parse_log("\n".join(rows)))


def test_log_lines_carry_their_timestamps_to_the_nanosecond() -> None:
    lines = parse_log("2026-11-20T12:00:01.123456789Z hello world\n2026-11-20T12:00:02Z\nno stamp here\n")
    assert [(line.time, line.text) for line in lines] == [
        (T0.replace(second=1, microsecond=123456), "hello world"), (T0.replace(second=2), "")]
    assert lines[0].key == int(T0.timestamp() + 1) * 10**9 + 123456789


def test_without_heartbeats_any_line_is_progress() -> None:
    log = absorb_sweep(AttemptLog(0), {0: read(0, f"{stamp(1)} loss=1", f"{stamp(3)} loss=0.5"), 1: read(1)},
                       PROGRESS_MARKER)
    progress = job_progress(log, {0, 1}, T0 + timedelta(seconds=5))
    assert progress.source == "Logs" and progress.first_progress == T0 + timedelta(seconds=1)
    assert [(r.index, r.step, r.last_progress) for r in progress.ranks] == [
        (0, None, T0 + timedelta(seconds=3)), (1, None, None)]
    assert log.cursors == {"llama-0-a0": parse_log(f"{stamp(3)} x")[0].key}


def test_once_a_heartbeat_is_seen_only_new_steps_count() -> None:
    log = absorb_sweep(AttemptLog(0), {0: read(0, f"{stamp(1)} starting", beat(2, 1), beat(4, 2))}, PROGRESS_MARKER)
    assert log.heartbeats and log.first_progress == T0 + timedelta(seconds=2)  # the first heartbeat
    rank = log.ranks[0]
    assert (rank.step, rank.last_progress, rank.step_seconds) == (2, T0 + timedelta(seconds=4), 2.0)  # measured
    # A stuck collective's noise and a repeated step are alive, not progress.
    log = absorb_sweep(log, {0: read(0, f"{stamp(10)} NCCL watchdog: waiting", beat(11, 2))}, PROGRESS_MARKER)
    assert log.ranks[0].last_progress == T0 + timedelta(seconds=4)
    log = absorb_sweep(log, {0: read(0, beat(12, 3, " step_seconds=0.5 samples_per_second=64"))}, PROGRESS_MARKER)
    rank = log.ranks[0]
    assert (rank.step, rank.step_seconds, rank.samples_per_second) == (3, 0.5, 64.0)  # reported beats measured


def test_unreadable_ranks_are_left_out_and_a_new_attempt_starts_afresh() -> None:
    log = absorb_sweep(AttemptLog(0), {0: read(0, beat(1, 1)), 1: read(1, beat(1, 1))}, PROGRESS_MARKER)
    assert [r.index for r in job_progress(log, {1}, T0).ranks] == [1]
    assert job_progress(AttemptLog(1), set(), T0).first_progress is None


def test_status_progress_reports_the_lowest_step_and_the_newest_progress() -> None:
    job = stored_job(2, hangDetection={"timeoutSeconds": 60})
    log = absorb_sweep(AttemptLog(0), {0: read(0, beat(1, 10)), 1: read(1, beat(2, 9))}, PROGRESS_MARKER)
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
    plain = absorb_sweep(AttemptLog(0), {0: read(0, f"{stamp(1)} loading")}, PROGRESS_MARKER)
    first = run(job, pods, progress=job_progress(plain, {0, 1}, NOW))
    assert first.status.progress.first_progress_time == "2026-11-20T12:00:01Z"
    # A restarted operator's prober only sees the logs' tails: a later first line.
    restarted = absorb_sweep(AttemptLog(0), {0: read(0, f"{stamp(30)} training")}, PROGRESS_MARKER)
    again = run(job, pods, previous=first.status, progress=job_progress(restarted, {0, 1}, NOW))
    assert again.status.progress.first_progress_time == "2026-11-20T12:00:01Z"
    beats = absorb_sweep(restarted, {0: read(0, beat(40, 1))}, PROGRESS_MARKER)
    later = run(job, pods, previous=again.status, progress=job_progress(beats, {0, 1}, NOW))
    assert (later.status.progress.first_progress_time, later.status.progress.source) == ("2026-11-20T12:00:40Z",
                                                                                         "Heartbeat")


def test_the_source_stays_heartbeat_when_no_rank_is_read_any_more() -> None:
    # Finished ranks are not read: an empty sweep at the end must not turn the source back to Logs.
    log = absorb_sweep(AttemptLog(0), {0: read(0, beat(1, 1))}, PROGRESS_MARKER)
    assert job_progress(log, set(), NOW).source == "Heartbeat"
    job = stored_job(2, hangDetection={"timeoutSeconds": 60})
    done = [pod(0, "Succeeded"), pod(1, "Succeeded")]
    running = run(job, [pod(0, started_at="2026-11-20T11:59:00Z"), pod(1, started_at="2026-11-20T11:59:00Z")],
                  progress=job_progress(log, {0, 1}, NOW))
    finished = run(job, done, previous=running.status, progress=job_progress(log, set(), NOW))
    assert (finished.status.progress.source, finished.status.progress.step) == ("Heartbeat", 1)
