"""Hang detection: no running rank progressed for hangDetection.timeoutSeconds → failure Hung, through the
failure policy; silence is measured from when every trainer runs, and only up to the last log read."""

from __future__ import annotations

import pytest

from multinode.api import TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.reconcile.hang import judge_hang
from datetime import timedelta

from multinode.reconcile.progress import JobProgress, RankProgress
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job

STARTED = "2026-11-20T11:58:00Z"  # both trainers run from 120 s before NOW
JOB = stored_job(2, hangDetection={"timeoutSeconds": 30})


def ago(seconds: float):
    return NOW - timedelta(seconds=seconds)


def running(*, started: str | None = STARTED, phase1: str = "Running"):
    return [pod(0, started_at=started, node="n0"), pod(1, phase1, started_at=started, node="n1")]


def progress(*ranks: RankProgress, checked=NOW, attempt: int = 0, first=None) -> JobProgress:
    return JobProgress(attempt, ranks, first, checked)


def rank(index: int, silent_for: float | None, step: int | None = 7) -> RankProgress:
    return RankProgress(index, f"n{index}", step if silent_for is not None else None,
                        ago(silent_for) if silent_for is not None else None)


def test_every_rank_silent_past_the_timeout_restarts_the_gang_with_reason_hung() -> None:
    result = run(JOB, running(), progress=progress(rank(0, 45), rank(1, 31)))
    [record] = result.status.restart_history
    assert (record.reason, record.counted, result.status.attempt) == ("Hung", True, 1)  # counted, by default
    assert record.message.startswith("no rank progressed (heartbeat) for 31s (hangDetection.timeoutSeconds 30): "
                                     "rank 0 on node n0: last progress 2026-11-20T11:59:15Z (step 7); rank 1")
    assert sorted(result.pods_to_delete) == ["llama-0-a0", "llama-1-a0"]
    assert condition(result.status, "Progressing").reason == "Hung"
    stalled = result.status.progress.stalled_ranks
    assert [(r.index, r.node, r.step) for r in stalled] == [(0, "n0", 7), (1, "n1", 7)]  # first to stall first
    assert result.status.progress.stalled_count == 2


def test_one_rank_progressing_is_not_a_hang() -> None:
    result = run(JOB, running(), progress=progress(rank(0, 300), rank(1, 5)))
    assert result.status.restart_history == [] and result.status.attempt == 0
    assert condition(result.status, "Progressing").reason == "ProgressSeen"


def test_the_clock_starts_when_every_trainer_runs_so_a_gang_that_never_prints_hangs() -> None:
    quiet = progress(rank(0, None), rank(1, None))
    assert run(JOB, running(started="2026-11-20T11:59:40Z"), progress=quiet).status.attempt == 0  # 20 s
    result = run(JOB, running(started="2026-11-20T11:59:25Z"), progress=quiet)
    assert "rank 0 on node n0: no progress since the gang started" in result.status.restart_history[0].message
    # Progress before the last pod started counts from that start (rank 0 printing alone is no gang).
    early = progress(rank(0, 100), rank(1, None))
    assert run(JOB, running(started="2026-11-20T11:59:40Z"), progress=early).status.attempt == 0


def test_no_verdict_without_a_fresh_read_of_every_running_rank() -> None:
    for seen in (None, progress(rank(0, 100)), progress(rank(0, 100), rank(1, 100), attempt=1),
                 progress(rank(0, 100), rank(1, 100), checked=ago(80)),  # silence only up to the last read
                 progress(rank(0, 100), rank(1, 100), checked=None)):
        assert run(JOB, running(), progress=seen).status.restart_history == [], seen
    # Pods not all running yet (the startup timeout's business), or no trainer start time reported.
    assert run(JOB, [pod(0, started_at=STARTED), pod(1, "Pending", node=None)],
               progress=progress(rank(0, 100), rank(1, 100))).status.restart_history == []
    assert run(JOB, running(started=None), progress=progress(rank(0, 100), rank(1, 100))).status.attempt == 0


def test_a_finished_rank_is_not_waited_for() -> None:
    result = run(JOB, running(phase1="Succeeded"), progress=progress(rank(0, 40)))
    assert result.status.restart_history[0].reason == "Hung"
    assert "rank 1" not in result.status.restart_history[0].message


def test_the_failure_policy_decides_a_rule_can_fail_the_job_or_not_count() -> None:
    fail = stored_job(2, hangDetection={"timeoutSeconds": 30},
                      failurePolicy={"rules": [{"action": "FailJob", "onReasons": ["Hung"]}]})
    result = run(fail, running(), progress=progress(rank(0, 40), rank(1, 40)))
    assert result.status.phase == "Failed"
    assert condition(result.status, "Failed").reason == "Hung"
    free = stored_job(2, hangDetection={"timeoutSeconds": 30},
                      failurePolicy={"rules": [{"action": "RestartWithoutCounting", "onReasons": ["Hung"]}]})
    result = run(free, running(), progress=progress(rank(0, 40), rank(1, 40)))
    assert (result.status.restarts, result.status.uncounted_restarts) == (0, 1)


def test_without_hang_detection_silence_is_fine() -> None:
    result = run(stored_job(2), running(), progress=progress(rank(0, 9999), rank(1, 9999)))
    assert result.status.restart_history == [] and result.status.progress is None


def test_a_big_job_names_a_bounded_number_of_ranks() -> None:
    job = stored_job(50, hangDetection={"timeoutSeconds": 30})
    pods = [pod(i, started_at=STARTED) for i in range(50)]
    result = run(job, pods, progress=progress(*(rank(i, 60 + i) for i in range(50))))
    assert len(result.status.progress.stalled_ranks) == 10 and result.status.progress.stalled_count == 50
    assert result.status.progress.stalled_ranks[0].index == 49  # silent longest
    assert result.status.restart_history[0].message.endswith("; and 40 more")


# The policy called directly.

@pytest.mark.parametrize(("current", "reported", "stalled"), [
    (running(), progress(rank(0, 45), rank(1, 31)), [0, 1]),           # every rank silent past the timeout
    (running(), progress(rank(0, 45), rank(1, 10)), None),             # one rank still progresses
    (running(), progress(rank(0, 45)), None),                          # a rank's log unread: no verdict
    (running(started=None), progress(rank(0, 45), rank(1, 45)), None), # the gang has not started
    (running(), progress(rank(0, 45), rank(1, 45), checked=ago(20)), None),  # silent only up to the last read
    (running(), progress(rank(0, 45), rank(1, 45), attempt=1), None),  # another attempt's progress
    (running(phase1="Succeeded"), progress(rank(0, 45)), [0]),         # finished ranks are not waited for
    (running(), progress(rank(0, None), rank(1, None)), [0, 1]),       # never progressed since the start
])
def test_a_gang_whose_running_ranks_all_stopped_progressing_is_hung(current, reported, stalled) -> None:
    decided = judge_hang(JOB, TrainingJobStatus(), {p.index: p for p in current}, reported, NOW)
    if stalled is None:
        assert decided.failure is None and decided.status == {} and decided.conditions == ()
        return
    assert decided.failure is not None and decided.failure.reason == Reason.HUNG
    assert [r.index for r in decided.status["progress"].stalled_ranks] == stalled
    assert [(c.type, c.status, c.reason) for c in decided.conditions] == [("Progressing", "False", "Hung")]
