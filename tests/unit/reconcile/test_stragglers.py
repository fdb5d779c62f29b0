"""Stragglers: a rank slower than factor × the other ranks' median step time, for forSeconds."""

from __future__ import annotations

from multinode.reconcile.decision import Decision
from multinode.api import TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.progress import ProgressStatus
from multinode.reconcile.stragglers import judge_stragglers
from datetime import timedelta

import pytest

from multinode.reconcile.progress import JobProgress, RankProgress
from multinode.reconcile.stragglers import median, slow_ranks
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job

STARTED = "2026-11-20T11:58:00Z"


def timed(*seconds: float | None) -> tuple[RankProgress, ...]:
    return tuple(RankProgress(i, f"n{i}", 100, NOW - timedelta(seconds=1), step_seconds=s)
                 for i, s in enumerate(seconds))


def job(n: int = 2, **stragglers):
    return stored_job(n, hangDetection={"timeoutSeconds": 600, "stragglers": {"forSeconds": 60, **stragglers}})


def pods(n: int = 2):
    return [pod(i, started_at=STARTED, node=f"n{i}") for i in range(n)]


@pytest.mark.parametrize("times, slow", [
    ((1.0, 1.0, 1.0, 2.5), [3]),
    ((1.0, 2.5), [1]),          # two ranks: each against the other
    ((1.0, 1.9), []),           # under the factor
    ((1.0, 1.0, 5.0, 3.0), [2, 3]),  # slowest first
    ((1.0, None, 4.0), [2]),    # ranks without a step time are left out
    ((0.0, 0.0, 1.0), []),      # nothing to compare against
])
def test_slow_ranks_against_the_median_of_the_others(times, slow) -> None:
    assert [r.index for r, _ in slow_ranks(list(timed(*times)), 2.0)] == slow


def test_median() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([4.0, 1.0, 2.0, 3.0]) == 2.5


def test_a_straggler_is_reported_after_for_seconds_with_an_event_once() -> None:
    j = job(4)
    seen = JobProgress(0, timed(1.0, 1.0, 1.0, 3.0), NOW, NOW)
    first = run(j, pods(4), progress=seen)
    entry = first.status.progress.stragglers[0]
    reported = (entry.index, entry.node, entry.since, first.status.progress.straggler_count)
    assert reported == (3, "n3", "2026-11-20T12:00:00Z", 0)
    assert first.requeue_after == 60  # comes back when it would count
    assert not any(c.type == "Stragglers" for c in first.status.conditions)
    later = run(j, pods(4), previous=first.status, progress=seen, now=NOW + timedelta(seconds=60))
    c = condition(later.status, "Stragglers")
    assert (c.status, c.reason) == ("True", "StragglersDetected")
    assert c.message == "rank 3 on node n3: 3s a step, the others' median 1s (over 2×) for 60s"
    assert [e.reason for e in later.events] == ["StragglersDetected"] and later.status.progress.straggler_count == 1
    again = run(j, pods(4), previous=later.status, progress=seen, now=NOW + timedelta(seconds=70))
    assert not [e for e in again.events if e.reason == "StragglersDetected"]  # one Event per new straggler
    healed = run(j, pods(4), previous=again.status, progress=JobProgress(0, timed(1.0, 1.0, 1.0, 1.0), NOW, NOW),
                 now=NOW + timedelta(seconds=80))
    assert condition(healed.status, "Stragglers").reason == "NoStragglers"
    assert healed.status.progress.stragglers == [] and healed.status.progress.median_step_seconds == 1.0


def test_ignore_reports_nothing() -> None:
    result = run(job(action="Ignore", forSeconds=0), pods(), progress=JobProgress(0, timed(1.0, 9.0), NOW, NOW))
    assert result.status.progress.stragglers == [] and not any(c.type == "Stragglers" for c in result.status.conditions)


def test_slow_ranks_reads_each_leave_one_out_median_off_the_sorted_list() -> None:
    # The O(n log n) reading agrees with computing every rank's reference from the others directly.
    import random

    rng = random.Random(7)
    for n in (2, 3, 4, 9, 10, 31):
        ranks = timed(*(rng.choice([0.5, 1.0, 1.0, 1.1, 2.5, 4.0]) for _ in range(n)))
        naive = []
        for r in ranks:
            others = [o.step_seconds for o in ranks if o is not r]
            reference = median(others)
            if reference > 0 and r.step_seconds > 1.5 * reference:
                naive.append((r.index, reference))
        got = sorted((r.index, ref) for r, ref in slow_ranks(list(ranks), 1.5))
        assert got == sorted(naive), n


# The policy called directly.

def _report(*stragglers: dict) -> TrainingJobStatus:
    return TrainingJobStatus(progress=ProgressStatus.model_validate({"attempt": 0, "stragglers": list(stragglers)}))


SLOW_SINCE = (NOW - timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(("config", "status", "times", "reported", "condition_", "event", "requeue"), [
    ({}, _report(), (1.0, 1.0, 4.0), [], None, False, 60.0),                      # slow from now: wait forSeconds
    ({}, _report({"index": 2, "since": SLOW_SINCE}), (1.0, 1.0, 4.0), [2], ("True", Reason.STRAGGLERS_DETECTED),
     True, None),                                                                  # slow for forSeconds: reported
    ({}, _report({"index": 2, "since": SLOW_SINCE, "reported": True}), (1.0, 1.0, 4.0), [2],
     ("True", Reason.STRAGGLERS_DETECTED), False, None),                           # reported before: no new Event
    ({"action": "Ignore"}, _report(), (1.0, 1.0, 4.0), [], None, False, None),
    ({}, _report(), (1.0, 1.0, 1.0), [], None, False, None),
])
def test_a_rank_slower_than_the_others_for_for_seconds_is_reported(config, status, times, reported, condition_,
                                                                   event, requeue) -> None:
    decided = judge_stragglers(job(3, **config), status, JobProgress(0, timed(*times), NOW, NOW), {0, 1, 2}, NOW)
    report = decided.status["progress"]
    assert [s.index for s in report.stragglers if s.reported] == reported
    assert report.straggler_count == len(reported) and report.median_step_seconds == 1.0
    assert [(c.status, c.reason) for c in decided.conditions] == ([condition_] if condition_ else [])
    assert [e.reason for e in decided.events] == ([Reason.STRAGGLERS_DETECTED] if event else [])
    assert decided.requeue_after == requeue


def test_a_straggler_gone_clears_the_condition_and_no_progress_says_nothing() -> None:
    was = TrainingJobStatus.model_validate({
        "progress": {"attempt": 0, "stragglers": [{"index": 2, "since": SLOW_SINCE, "reported": True}]},
        "conditions": [{"type": "Stragglers", "status": "True", "reason": "StragglersDetected", "message": "m",
                        "lastTransitionTime": SLOW_SINCE}]})
    cleared = judge_stragglers(job(3), was, JobProgress(0, timed(1.0, 1.0, 1.0), NOW, NOW), {0, 1, 2}, NOW)
    assert [(c.status, c.reason) for c in cleared.conditions] == [("False", Reason.NO_STRAGGLERS)]
    assert judge_stragglers(job(3), was, None, {0, 1, 2}, NOW) == Decision()
