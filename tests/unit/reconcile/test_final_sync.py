"""The final sync (final_sync.py): a finished checkpointed job waits for the mirror's last pass, or its timeout."""

from __future__ import annotations

from multinode.reconcile.decision import Decision
from multinode.testing import stored_job
import pytest

from multinode.api import TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.reconcile.final_sync import hold_for_final_sync
from datetime import timedelta

from multinode.api import Phase
from tests.unit.reconcile.planning import LATEST, NOW, condition, pod, run, running_mirror
from multinode.testing import checkpointed_job as job


def test_success_waits_for_the_final_sync_then_finishes() -> None:
    done_pods = [pod(0, "Succeeded"), pod(1, "Succeeded")]
    running = run(job(), [pod(0), pod(1)], mirror=running_mirror())
    waiting = run(job(), done_pods, previous=running.status, mirror=running_mirror())

    assert waiting.status.phase == Phase.RUNNING, "not Succeeded before the final sync"
    synced = condition(waiting.status, "CheckpointsSynced")
    assert (synced.status, synced.reason) == ("False", "FinalSyncRequested")
    assert waiting.requeue_after == 1800
    assert [e.reason for e in waiting.events] == ["FinalSyncRequested"]

    later = NOW + timedelta(seconds=40)
    after_sync = run(job(checkpoints={"finalSyncTime": "2026-11-20T12:00:30Z", "latest": LATEST}), done_pods,
                     previous=waiting.status, mirror=running_mirror("Succeeded"), now=later)
    assert after_sync.status.phase == Phase.SUCCEEDED
    assert condition(after_sync.status, "CheckpointsSynced").status == "True"
    assert after_sync.status.completion_time == "2026-11-20T12:00:40Z"


def test_failure_stops_the_nodes_at_once_but_waits_for_the_final_sync() -> None:
    def failing_job():
        j = job()
        j.spec.failure_policy.max_restarts = 0
        return j

    running = run(failing_job(), [pod(0), pod(1)], mirror=running_mirror())
    failing = run(failing_job(), [pod(0), pod(1, "Failed", exit_code=1)], previous=running.status,
                  mirror=running_mirror())

    assert failing.pods_to_delete == ["llama-0-a0"], "the healthy node gives its GPUs back now"
    assert failing.status.phase == Phase.RUNNING
    # Node 0 is still stopping: it may write yet, so the final sync is not asked for until it has.
    assert condition(failing.status, "CheckpointsSynced").reason == "FinalSyncWaitingForPods"
    stopped = run(failing_job(), [pod(0, "Failed", exit_code=143), pod(1, "Failed", exit_code=1)],
                  previous=failing.status, mirror=running_mirror(), now=NOW + timedelta(seconds=30))
    assert condition(stopped.status, "CheckpointsSynced").reason == "FinalSyncRequested"


def test_final_sync_times_out_into_the_terminal_phase() -> None:
    done_pods = [pod(0, "Succeeded"), pod(1, "Succeeded")]
    waiting = run(job(finalSyncTimeoutSeconds=60), done_pods, mirror=running_mirror())
    timed_out = run(job(finalSyncTimeoutSeconds=60), done_pods, previous=waiting.status,
                    mirror=running_mirror(), now=NOW + timedelta(seconds=61))

    assert timed_out.status.phase == Phase.SUCCEEDED
    synced = condition(timed_out.status, "CheckpointsSynced")
    assert (synced.status, synced.reason) == ("False", "FinalSyncTimedOut")
    assert "llama-mirror" in timed_out.pods_to_delete


def test_the_final_sync_is_requested_only_once_no_pod_may_write() -> None:
    """The final pass publishes the newest DeepSpeed/HF checkpoint without waiting for it to settle: a rank
    still stopping (its SIGTERM handler saving) or a pod of an older attempt still terminating could be
    writing it. Wait until every pod has exited or is gone; the timeout counts from when training ended."""
    from multinode.mirror.loop import final_sync_requested

    leader_only = job()
    leader_only.spec.success_policy = "LeaderOnly"
    running = run(leader_only, [pod(0), pod(1)], mirror=running_mirror())
    # The leader is done: the job succeeded, and node 1, still running, is told to stop.
    waiting = run(leader_only, [pod(0, "Succeeded"), pod(1)], previous=running.status, mirror=running_mirror())
    assert waiting.pods_to_delete == ["llama-1-a0"]

    synced = condition(waiting.status, "CheckpointsSynced")
    assert (synced.status, synced.reason) == ("False", "FinalSyncWaitingForPods") and "llama-1-a0" in synced.message
    assert not final_sync_requested(waiting.status.model_dump(by_alias=True, mode="json"))
    assert waiting.status.phase == Phase.RUNNING and "FinalSyncRequested" not in [e.reason for e in waiting.events]

    later = NOW + timedelta(seconds=20)
    asked = run(leader_only, [pod(0, "Succeeded")], previous=waiting.status, mirror=running_mirror(), now=later)
    synced = condition(asked.status, "CheckpointsSynced")
    assert (synced.status, synced.reason) == ("False", "FinalSyncRequested")
    assert final_sync_requested(asked.status.model_dump(by_alias=True, mode="json"))
    assert [e.reason for e in asked.events] == ["FinalSyncRequested"]
    assert asked.requeue_after == 1800 - 20   # the wait began when training ended


# The policy called directly.

def _waiting_since(seconds: int, reason: str = Reason.FINAL_SYNC_REQUESTED) -> list[dict]:
    return [{"type": "CheckpointsSynced", "status": "False", "reason": reason, "message": "m",
             "lastTransitionTime": (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")}]


@pytest.mark.parametrize(("checkpoints", "conditions", "pods", "held", "reason", "event", "requeue"), [
    (None, [], [pod(0, "Succeeded")], True, Reason.FINAL_SYNC_REQUESTED, True, 600.0),       # first request
    (None, _waiting_since(100), [pod(0, "Succeeded")], True, Reason.FINAL_SYNC_REQUESTED, False, 500.0),
    (None, [], [pod(0, "Succeeded"), pod(1)], True, Reason.FINAL_SYNC_WAITING_FOR_PODS, False, 600.0),
    (None, _waiting_since(600), [pod(0, "Succeeded")], False, Reason.FINAL_SYNC_TIMED_OUT, False, None),
    ({"finalSyncTime": "2026-11-20T11:59:00Z"}, [], [], False, Reason.FINAL_SYNC_DONE, False, None),
])
def test_a_finished_checkpointed_job_waits_for_the_final_sync(checkpoints, conditions, pods, held, reason, event,
                                                             requeue) -> None:
    status = TrainingJobStatus.model_validate({"conditions": conditions, "checkpoints": checkpoints})
    stays, decided = hold_for_final_sync(job(finalSyncTimeoutSeconds=600), status, status, NOW, pods)
    assert stays == held and decided.requeue_after == requeue
    synced = decided.conditions[0]
    assert (synced.type, synced.reason) == ("CheckpointsSynced", reason)
    assert synced.status == ("True" if reason == Reason.FINAL_SYNC_DONE else "False")
    assert [c.type for c in decided.conditions[1:]] == (["Running"] if held else [])
    assert [e.reason for e in decided.events] == ([reason] if event else [])


def test_a_job_without_checkpointing_never_waits() -> None:
    assert hold_for_final_sync(stored_job(2), TrainingJobStatus(), TrainingJobStatus(), NOW, []) == (
        False, Decision())
