"""A checkpoint before a planned disruption (disruption.py): a cordoned node of the gang, or a user's request,
opens status.checkpointRequest; a mirrored checkpoint answers it, or its wait ends; a cordoned node's gang then
moves off it (NodeDrained, not counted)."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from multinode.api.checkpointing import CheckpointRequestState, CheckpointRequestStatus, MirroredCheckpointStatus
from multinode.api.constants import ANNOTATION_CHECKPOINT_REQUEST
from multinode.api.timestamps import rfc3339
from multinode.api.progress import ProgressStatus
from multinode.reconcile.disruption import DEFAULT_REQUEST_SECONDS, answers, cordoned_nodes, request_id_of
from multinode.testing import checkpointed_job
from tests.unit.reconcile.planning import NOW, pod, run

CORDONED = frozenset({"n1"})
PODS = [pod(0, node="n0"), pod(1, node="n1")]


def _latest(step: int, at) -> dict:
    return {"name": f"step-{step}", "path": f"/checkpoints/llama/step-{step}", "step": step, "bytes": 1,
            "mirroredAt": rfc3339(at)}


def _job(checkpoints=None, seconds=60, annotations=None):
    job = checkpointed_job(checkpoints, beforeDisruptionSeconds=seconds)
    if annotations:
        job.metadata.annotations = annotations
    return job


def _running(job):
    status = run(job, PODS).status
    assert status.phase == Phase.RUNNING
    return status


def test_a_cordoned_node_of_a_running_gang_opens_a_request_and_holds_the_gang() -> None:
    job = _job()
    opened = run(job, PODS, previous=_running(job), cordoned_nodes=CORDONED)

    request = opened.status.checkpoint_request
    assert request is not None and request.state == CheckpointRequestState.REQUESTED
    assert (request.reason, request.attempt) == ("NodeCordoned", 0) and "n1" in request.message
    assert opened.status.attempt == 0 and opened.pods_to_delete == [], "nothing moves before the checkpoint"
    assert [(e.type, e.reason) for e in opened.events] == [("Normal", "CheckpointRequested")]
    assert opened.requeue_after is not None and opened.requeue_after <= 60


def test_the_mirrored_checkpoint_answers_it_and_the_gang_moves_off_the_node_uncounted() -> None:
    job = _job()
    opened = run(job, PODS, previous=_running(job), cordoned_nodes=CORDONED)
    later = NOW + timedelta(seconds=5)
    answered_job = _job(checkpoints={"latest": _latest(42, later)})
    moved = run(answered_job, PODS, previous=opened.status, cordoned_nodes=CORDONED, now=later)

    request = moved.status.checkpoint_request
    assert (request.state, request.checkpoint) == (CheckpointRequestState.MIRRORED, "step-42")
    assert (moved.status.phase, moved.status.attempt, moved.status.restarts) == (Phase.RESTARTING, 1, 0)
    record = moved.status.restart_history[-1]
    assert (record.reason, record.counted) == ("NodeDrained", False) and "step-42" in record.message
    assert sorted(moved.pods_to_delete) == ["llama-0-a0", "llama-1-a0"]
    assert "CheckpointMirrored" in [e.reason for e in moved.events]


def test_a_checkpoint_mirrored_before_the_request_does_not_answer_it() -> None:
    job = _job()
    opened = run(job, PODS, previous=_running(job), cordoned_nodes=CORDONED)
    old = _job(checkpoints={"latest": _latest(40, NOW - timedelta(seconds=30))})
    still = run(old, PODS, previous=opened.status, cordoned_nodes=CORDONED, now=NOW + timedelta(seconds=5))
    assert still.status.checkpoint_request.state == CheckpointRequestState.REQUESTED
    assert still.status.attempt == 0


def test_a_trainer_that_ignores_the_request_is_waited_for_only_up_to_the_limit() -> None:
    job = _job(seconds=30)
    opened = run(job, PODS, previous=_running(job), cordoned_nodes=CORDONED)
    waiting = run(job, PODS, previous=opened.status, cordoned_nodes=CORDONED, now=NOW + timedelta(seconds=29))
    assert waiting.status.attempt == 0 and waiting.requeue_after is not None and waiting.requeue_after <= 1

    over = run(job, PODS, previous=opened.status, cordoned_nodes=CORDONED, now=NOW + timedelta(seconds=30))
    assert over.status.checkpoint_request.state == CheckpointRequestState.TIMED_OUT
    assert ("Warning", "CheckpointRequestTimedOut") in [(e.type, e.reason) for e in over.events]
    record = over.status.restart_history[-1]
    assert record.reason == "NodeDrained" and "CheckpointRequestTimedOut" in record.message


def test_without_a_wait_or_without_checkpointing_a_cordon_changes_nothing() -> None:
    for job in (_job(seconds=0), checkpointed_job()):
        result = run(job, PODS, previous=_running(job), cordoned_nodes=CORDONED)
        assert result.status.checkpoint_request is None and result.status.attempt == 0
        assert not any(o["kind"] == "PodDisruptionBudget" for o in run(job, []).objects_to_create)


def test_a_gang_not_running_yet_moves_off_a_cordoned_node_at_once() -> None:
    job = _job()
    starting = [pod(0, node="n0"), pod(1, "Pending", node="n1")]
    result = run(job, starting, previous=run(job, starting).status, cordoned_nodes=CORDONED)
    assert result.status.checkpoint_request is None
    assert result.status.restart_history[-1].reason == "NodeDrained"


def test_a_users_request_opens_once_and_never_restarts_the_gang() -> None:
    job = _job(seconds=0, annotations={ANNOTATION_CHECKPOINT_REQUEST: "cli-1"})
    opened = run(job, PODS, previous=_running(job))
    request = opened.status.checkpoint_request
    assert (request.id, request.reason, request.state) == ("cli-1", "UserRequested", CheckpointRequestState.REQUESTED)

    later = NOW + timedelta(seconds=DEFAULT_REQUEST_SECONDS)
    over = run(job, PODS, previous=opened.status, now=later)
    assert over.status.checkpoint_request.state == CheckpointRequestState.TIMED_OUT
    again = run(job, PODS, previous=over.status, now=later + timedelta(seconds=1))
    assert again.status.checkpoint_request.state == CheckpointRequestState.TIMED_OUT, "the same id: not reopened"
    assert again.status.attempt == 0


def test_the_budget_is_created_with_the_pods_and_holds_only_the_node_pods() -> None:
    created = run(_job(), []).objects_to_create
    (budget,) = [o for o in created if o["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["minAvailable"] == 2
    assert budget["spec"]["selector"] == {"matchLabels": {"multinode.dev/job-name": "llama"},
                                          "matchExpressions": [{"key": "multinode.dev/node-index",
                                                                "operator": "Exists"}]}
    assert budget["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"


def test_answers_needs_a_checkpoint_published_after_the_request_and_of_its_step_or_later() -> None:
    request = CheckpointRequestStatus(id="x", reason="NodeCordoned", attempt=0, step=41, requested_time=rfc3339(NOW),
                                      state=CheckpointRequestState.REQUESTED)
    after = NOW + timedelta(seconds=1)

    def latest(step, at):
        return MirroredCheckpointStatus.model_validate(_latest(step, at))
    assert answers(request, latest(41, after), NOW)
    assert not answers(request, latest(40, after), NOW), "a periodic save of an older step, published late"
    assert not answers(request, latest(45, NOW - timedelta(seconds=1)), NOW)
    assert not answers(request, None, NOW)


def test_cordoned_nodes_are_those_of_live_pods() -> None:
    pods = [pod(0, node="n1"), pod(1, "Failed", node="n1"), pod(2, node="n0")]
    assert cordoned_nodes(pods, CORDONED) == ["n1"]
    assert cordoned_nodes([pod(0, node="n0")], CORDONED) == []


def test_a_node_cordoned_again_after_an_uncordon_opens_a_new_request() -> None:
    job = _job(seconds=30)
    opened = run(job, PODS, previous=_running(job), cordoned_nodes=CORDONED)
    later = NOW + timedelta(seconds=30)
    ended = run(job, PODS, previous=opened.status, cordoned_nodes=frozenset(), now=later)
    assert ended.status.checkpoint_request.state == CheckpointRequestState.TIMED_OUT
    assert ended.status.attempt == 0, "the node is back: the gang stays"

    again = run(job, PODS, previous=ended.status, cordoned_nodes=CORDONED, now=later + timedelta(seconds=5))
    request = again.status.checkpoint_request
    assert request.state == CheckpointRequestState.REQUESTED and request.id != opened.status.checkpoint_request.id


def test_a_users_request_id_is_kept_to_one_word() -> None:
    job = _job(annotations={ANNOTATION_CHECKPOINT_REQUEST: "cli-1\nNodeCordoned"})
    assert request_id_of(job) == "cli-1NodeCordoned", "no second line for the trainers to read as the reason"
    assert request_id_of(_job(annotations={ANNOTATION_CHECKPOINT_REQUEST: "\n\t "})) == ""
    assert run(_job(annotations={ANNOTATION_CHECKPOINT_REQUEST: "\n"}), PODS).status.checkpoint_request is None


def test_the_requested_step_is_this_attempts() -> None:
    job = _job()
    running = _running(job)
    stale = running.model_copy(update={"progress": ProgressStatus(attempt=0, step=500), "attempt": 1})
    assert run(job, [pod(0, node="n0", attempt=1), pod(1, node="n1", attempt=1)], previous=stale,
               cordoned_nodes=CORDONED).status.checkpoint_request.step is None
