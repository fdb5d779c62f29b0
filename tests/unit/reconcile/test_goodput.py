"""Goodput accounting (reconcile/goodput.py): each cause, through plan() where the planner can produce the
state, and through account() for what needs a progress source (Hung restarts come from another policy)."""

from __future__ import annotations

from datetime import datetime, timedelta

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.goodput import GoodputStatus, LostCause, LostSeconds
from multinode.api.progress import ProgressStatus
from multinode.api.status import RestartRecord
from multinode.api.timestamps import rfc3339
from multinode.reconcile.goodput import GOODPUT_COMMIT_SECONDS, GOODPUT_REFRESH_SECONDS, account
from multinode.reconcile.outcome import Plan
from multinode.testing import stored_job
from multinode.testing import checkpointed_job
from tests.unit.reconcile.planning import NOW, pod, run

JOB = stored_job(2)
# Progress is read (and status.progress kept) only for jobs with hang detection.
WATCHED = stored_job(2, hangDetection={"timeoutSeconds": 600})


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def lost(status: TrainingJobStatus) -> dict[str, int]:
    assert status.goodput is not None
    return {cause.value: status.goodput.lost.get(cause) for cause in LostCause if status.goodput.lost.get(cause)}


def productive(status: TrainingJobStatus) -> int:
    assert status.goodput is not None
    return status.goodput.productive_seconds


def started(job: TrainingJob = JOB) -> list[Plan]:
    """Created at 0, all pods bound at 10, all running at 25, still running at 100."""
    created = run(job, [], now=at(0))
    bound = run(job, [pod(0, "Pending"), pod(1, "Pending")], previous=created.status, now=at(10))
    running = run(job, [pod(0), pod(1)], previous=bound.status, now=at(25))
    later = run(job, [pod(0), pod(1)], previous=running.status, now=at(100))
    return [created, bound, running, later]


def test_the_clock_starts_with_the_first_pods_and_splits_waiting_from_training() -> None:
    created, bound, running, later = started()
    assert created.status.goodput == GoodputStatus(accounted_until=rfc3339(at(0)))
    assert bound.status.phase == Phase.STARTING and lost(bound.status) == {"scheduling": 10}
    assert running.status.phase == Phase.RUNNING and lost(running.status) == {"scheduling": 10, "startup": 15}
    g = later.status.goodput
    assert g is not None
    assert (g.productive_seconds, g.lost_seconds, g.percent) == (75, 25, 75)
    assert g.attempt_productive_seconds == 75 and g.accounted_until == rfc3339(at(100))


def test_scheduling_counts_until_every_pod_is_bound() -> None:
    created = run(JOB, [], now=at(0))
    unbound = run(JOB, [pod(0, "Pending", node=None), pod(1, "Pending", node=None)], previous=created.status,
                  now=at(30))
    assert unbound.status.phase == Phase.PENDING
    bound = run(JOB, [pod(0, "Pending"), pod(1, "Pending")], previous=unbound.status, now=at(95))
    assert lost(bound.status) == {"scheduling": 95} and productive(bound.status) == 0


def test_planning_again_on_the_same_observations_counts_nothing_twice() -> None:
    *_, _running, later = started()
    again = run(JOB, [pod(0), pod(1)], previous=later.status, now=at(100))
    assert again.status.goodput == later.status.goodput
    # The same state a moment later commits nothing, so the worker has no status to write.
    soon = run(JOB, [pod(0), pod(1)], previous=later.status, now=at(100 + GOODPUT_COMMIT_SECONDS - 1))
    assert soon.status.goodput == later.status.goodput
    # The interval is counted once it is committed, from the last accounted time.
    due = run(JOB, [pod(0), pod(1)], previous=soon.status, now=at(100 + GOODPUT_COMMIT_SECONDS))
    assert productive(due.status) == 75 + GOODPUT_COMMIT_SECONDS


def test_an_operator_restart_counts_from_the_stored_status() -> None:
    *_, later = started()
    stored = TrainingJob.model_validate({**JOB.model_dump(by_alias=True, exclude_none=True),
                                         "status": later.status.model_dump(by_alias=True, exclude_none=True)})
    # A new operator has no status of its own: it plans from the job's, twice (two reconciles, one status).
    first = run(stored, [pod(0), pod(1)], previous=None, now=at(400))
    second = run(stored, [pod(0), pod(1)], previous=None, now=at(400))
    assert productive(first.status) == productive(second.status) == 375
    assert first.status.goodput == second.status.goodput
    assert first.status.goodput is not None and first.status.goodput.accounted_until == rfc3339(at(400))


def test_sub_second_times_are_counted_in_whole_seconds_without_loss() -> None:
    created = run(JOB, [], now=at(0.7))
    running = run(JOB, [pod(0), pod(1)], previous=created.status, now=at(1.2))
    later = run(JOB, [pod(0), pod(1)], previous=running.status, now=at(120.9))
    # 1 s waiting (0 → 1), then 1 → 120 training: the fraction after 120 waits for the next pass.
    assert lost(running.status) == {"scheduling": 1} and productive(later.status) == 119


def test_a_restart_loses_the_attempts_work_and_the_wait_for_the_next_attempt() -> None:
    job = stored_job(2, failurePolicy={"backoff": {"initialSeconds": 7}})
    *_, later = started(job)
    failed = run(job, [pod(0), pod(1, "Failed", exit_code=1, reason="Error")], previous=later.status, now=at(160))
    assert failed.status.phase == Phase.RESTARTING
    # No checkpoint: everything attempt 0 trained (25 → 160) is done again by attempt 1.
    assert productive(failed.status) == 0 and lost(failed.status) == {"scheduling": 10, "startup": 15, "redone": 135}
    assert failed.status.goodput is not None and failed.status.goodput.attempt_productive_seconds == 0

    waiting = run(job, [pod(0, "Failed"), pod(1, "Failed")], previous=failed.status, now=at(163))
    # Still in backoff: the same state, committed later (with the pods' creation).
    assert waiting.pods_to_create == [] and waiting.status.goodput == failed.status.goodput
    next_attempt = run(job, [], previous=waiting.status, now=at(167))
    assert [p["metadata"]["name"] for p in next_attempt.pods_to_create] == ["llama-0-a1", "llama-1-a1"]
    assert lost(next_attempt.status)["restart"] == 7

    # The next attempt's waits and work count on top: per-cause totals are cumulative.
    bound = run(job, [pod(0, "Pending", attempt=1), pod(1, "Pending", attempt=1)], previous=next_attempt.status,
                now=at(170))
    running = run(job, [pod(0, attempt=1), pod(1, attempt=1)], previous=bound.status, now=at(172))
    trained = run(job, [pod(0, attempt=1), pod(1, attempt=1)], previous=running.status, now=at(272))
    assert lost(trained.status) == {"scheduling": 13, "startup": 17, "restart": 7, "redone": 135}
    assert productive(trained.status) == 100
    g = trained.status.goodput
    assert g is not None and g.productive_seconds + g.lost_seconds == 272  # every second of the wall time, once


def test_work_since_the_latest_mirrored_checkpoint_is_redone() -> None:
    plain = checkpointed_job()
    *_, later = started(plain)
    latest = {"name": "checkpoint-300", "path": "/checkpoints/llama/checkpoint-300", "step": 300, "bytes": 10,
              "mirroredAt": rfc3339(at(130))}
    job = checkpointed_job({"latest": latest})
    failed = run(job, [pod(0), pod(1, "Failed", exit_code=1)], previous=later.status, now=at(160))
    assert lost(failed.status)["redone"] == 30 and productive(failed.status) == 135 - 30


def test_a_checkpoint_of_an_earlier_attempt_does_not_make_redone_larger_than_the_attempts_work() -> None:
    job = checkpointed_job({"latest": {"name": "c", "path": "/checkpoints/llama/c", "bytes": 1,
                                       "mirroredAt": rfc3339(at(-3600))}})
    *_, later = started(job)
    failed = run(job, [pod(0), pod(1, "Failed", exit_code=1)], previous=later.status, now=at(160))
    assert lost(failed.status)["redone"] == 135 and productive(failed.status) == 0


def test_a_lost_node_is_a_restart_like_any_other() -> None:
    *_, later = started()
    lost_node = run(JOB, [pod(0)], previous=later.status, now=at(130))
    assert lost_node.status.restart_history[-1].reason == Reason.NODE_LOST
    assert lost(lost_node.status) == {"scheduling": 10, "startup": 15, "redone": 105}
    assert "hang" not in lost(lost_node.status)


def test_a_failure_before_training_redoes_nothing() -> None:
    _created, bound, *_ = started()
    failed = run(JOB, [pod(0, "Pending"), pod(1, "Failed", exit_code=2)], previous=bound.status, now=at(40))
    assert failed.status.phase == Phase.RESTARTING
    assert lost(failed.status) == {"scheduling": 10, "startup": 30} and productive(failed.status) == 0


def test_finished_jobs_stop_the_clock() -> None:
    *_, later = started()
    done = run(JOB, [pod(0, "Succeeded"), pod(1, "Succeeded")], previous=later.status, now=at(150))
    assert done.status.phase == Phase.SUCCEEDED and productive(done.status) == 125
    afterwards = run(JOB, [pod(0, "Succeeded"), pod(1, "Succeeded")], previous=done.status, now=at(5000))
    assert afterwards.status.goodput == done.status.goodput and afterwards.requeue_after is None

    failed_job = stored_job(2, failurePolicy={"maxRestarts": 0})
    *_, running = started(failed_job)
    failed = run(failed_job, [pod(0), pod(1, "Failed", exit_code=1)], previous=running.status, now=at(130))
    assert failed.status.phase == Phase.FAILED and productive(failed.status) == 105
    assert run(failed_job, [], previous=failed.status, now=at(900)).status.goodput == failed.status.goodput


def test_the_final_sync_wait_is_not_training() -> None:
    job = checkpointed_job()
    *_, later = started(job)
    holding = run(job, [pod(0, "Succeeded"), pod(1, "Succeeded")], previous=later.status, now=at(150))
    assert holding.status.phase == Phase.RUNNING and productive(holding.status) == 125
    still = run(job, [pod(0, "Succeeded"), pod(1, "Succeeded")], previous=holding.status, now=at(900))
    assert still.status.goodput == holding.status.goodput


def test_suspended_time_is_not_counted() -> None:
    *_, later = started()
    suspended_job = stored_job(2, suspend=True)
    suspended = run(suspended_job, [pod(0), pod(1)], previous=later.status, now=at(130))
    assert suspended.status.phase == Phase.SUSPENDED and productive(suspended.status) == 105
    resumed = run(JOB, [], previous=suspended.status, now=at(4000))
    assert resumed.status.goodput is not None
    assert resumed.status.goodput.productive_seconds + resumed.status.goodput.lost_seconds == 130
    assert resumed.status.goodput.accounted_until == rfc3339(at(4000))
    bound = run(JOB, [pod(0, "Pending", attempt=1), pod(1, "Pending", attempt=1)], previous=resumed.status,
                now=at(4020))
    assert lost(bound.status)["scheduling"] == 10 + 20


def test_a_job_already_running_when_the_operator_learnt_goodput_counts_from_then() -> None:
    *_, later = started()
    upgraded = later.status.model_copy(update={"goodput": None})
    first = run(JOB, [pod(0), pod(1)], previous=upgraded, now=at(5000))
    assert first.status.goodput == GoodputStatus(accounted_until=rfc3339(at(5000)))


def test_the_job_comes_back_while_the_clock_runs() -> None:
    *_, later = started()
    assert later.requeue_after is not None and later.requeue_after <= GOODPUT_REFRESH_SECONDS


# Progress: the state a progress source leaves in status.progress (written by the progress policy).


def with_progress(status: TrainingJobStatus, **fields: str | int) -> TrainingJobStatus:
    return status.model_copy(update={"progress": ProgressStatus(source="Heartbeat", **fields)})  # type: ignore[arg-type]


def test_with_a_progress_source_running_before_the_first_step_is_startup() -> None:
    _created, bound, *_ = started(WATCHED)
    running = run(WATCHED, [pod(0), pod(1)], previous=with_progress(bound.status), now=at(25))
    no_step_yet = run(WATCHED, [pod(0), pod(1)], previous=running.status, now=at(100))
    assert productive(no_step_yet.status) == 0 and lost(no_step_yet.status)["startup"] == 90

    stepping = with_progress(no_step_yet.status, step=10, first_progress_time=rfc3339(at(130)),
                             last_progress_time=rfc3339(at(170)))
    later = run(WATCHED, [pod(0), pod(1)], previous=stepping, now=at(200))
    # 100 → 130 still starting (the first step's time decides, not when it was seen), 130 → 200 training.
    assert lost(later.status)["startup"] == 120 and productive(later.status) == 70


def test_a_first_progress_of_an_earlier_attempt_does_not_count_for_this_one() -> None:
    before = TrainingJobStatus(phase=Phase.RUNNING, start_time=rfc3339(at(0)), attempt=1,
                               attempt_start_time=rfc3339(at(50)),
                               progress=ProgressStatus(source="Heartbeat", step=5, first_progress_time=rfc3339(at(10))),
                               goodput=GoodputStatus(accounted_until=rfc3339(at(60))))
    g = account(before, before.model_copy(deep=True), at(160)).status["goodput"]
    assert g.lost.startup == 100 and g.productive_seconds == 0


def hung_restart(before: TrainingJobStatus, now: datetime) -> TrainingJobStatus:
    """What a Hung restart leaves: the next attempt, Restarting, with its record (the progress policy's work)."""
    record = RestartRecord(attempt=before.attempt, reason=Reason.HUNG, message="no progress", counted=True,
                           time=rfc3339(now))
    return before.model_copy(deep=True, update={"phase": Phase.RESTARTING, "attempt": before.attempt + 1,
                                                "restarts": before.restarts + 1,
                                                "restart_history": [*before.restart_history, record]})


def test_a_hang_loses_the_time_since_the_last_progress_and_the_work_before_it_is_redone() -> None:
    before = TrainingJobStatus(
        phase=Phase.RUNNING, start_time=rfc3339(at(0)), attempt_start_time=rfc3339(at(0)),
        progress=ProgressStatus(source="Heartbeat", step=900, first_progress_time=rfc3339(at(40)),
                                last_progress_time=rfc3339(at(700))),
        goodput=GoodputStatus(productive_seconds=560, attempt_productive_seconds=560,
                              lost=LostSeconds(scheduling=10, startup=30), accounted_until=rfc3339(at(600))))
    decided = account(before, hung_restart(before, at(1000)), at(1000))
    assert decided.requeue_after == GOODPUT_REFRESH_SECONDS
    g = decided.status["goodput"]
    # Trained 40 → 1000 (960 s): hung 700 → 1000, and 40 → 700 is repeated (no checkpoint).
    assert (g.lost.hang, g.lost.redone, g.productive_seconds, g.attempt_productive_seconds) == (300, 660, 0, 0)
    assert g.lost_seconds == 10 + 30 + 300 + 660 and g.percent == 0


def test_a_hang_after_a_checkpoint_redoes_only_the_work_since_it() -> None:
    job = checkpointed_job({"latest": {"name": "c", "path": "/checkpoints/llama/c", "bytes": 1,
                                       "mirroredAt": rfc3339(at(500))}})
    before = TrainingJobStatus(
        phase=Phase.RUNNING, start_time=rfc3339(at(0)), attempt_start_time=rfc3339(at(0)),
        progress=ProgressStatus(source="Logs", step=900, first_progress_time=rfc3339(at(40)),
                                last_progress_time=rfc3339(at(700))),
        goodput=GoodputStatus(productive_seconds=960, attempt_productive_seconds=960,
                              lost=LostSeconds(startup=40), accounted_until=rfc3339(at(1000))))
    status = hung_restart(before, at(1000))
    status.checkpoints = job.status.checkpoints if job.status else None
    g = account(before, status, at(1000)).status["goodput"]
    assert (g.lost.hang, g.lost.redone, g.productive_seconds) == (300, 200, 460)


def test_other_restart_reasons_are_never_hang() -> None:
    before = TrainingJobStatus(
        phase=Phase.RUNNING, start_time=rfc3339(at(0)), attempt_start_time=rfc3339(at(0)),
        progress=ProgressStatus(source="Heartbeat", step=9, first_progress_time=rfc3339(at(0)),
                                last_progress_time=rfc3339(at(10))),
        goodput=GoodputStatus(accounted_until=rfc3339(at(0))))
    status = hung_restart(before, at(100))
    status.restart_history[-1].reason = "NodeUnhealthy"
    g = account(before, status, at(100)).status["goodput"]
    assert (g.lost.hang, g.lost.redone) == (0, 100)


def test_a_clock_behind_the_last_accounted_time_never_moves_it_back() -> None:
    *_, later = started()
    behind = run(JOB, [pod(0), pod(1, "Failed", exit_code=1)], previous=later.status, now=at(40))
    assert behind.status.goodput is not None and behind.status.goodput.accounted_until == rfc3339(at(100))
    assert lost(behind.status)["redone"] == 75
