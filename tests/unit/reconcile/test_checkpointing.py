"""Planning with checkpointing (checkpointing.py): the mirror's objects and where each attempt resumes from."""

from __future__ import annotations

import pytest

from datetime import timedelta

from multinode.api import TrainingJob
from multinode.api.timestamps import rfc3339
from multinode.reconcile import ObservedMirror
from multinode.reconcile.checkpointing import Resumer, mirror_on_lost_node, report_mirror
from multinode.reconcile.node_loss import GONE, NodeDown
from multinode.reconcile.observe import Wait
from tests.unit.reconcile.planning import LATEST, NOW, env, fail_node_1, pod, run, running_mirror
from multinode.testing import checkpointed_job as job
from multinode.testing import stored_job


def test_mirror_identity_then_pod_are_created_with_the_job() -> None:
    result = run(job(), [])

    assert [(o["kind"], o["metadata"]["name"]) for o in result.objects_to_create] == [
        ("ServiceAccount", "llama-mirror"), ("RoleBinding", "llama-mirror"), ("Pod", "llama-mirror")]
    # No Role of its own: the binding names the mirror ClusterRole the chart ships.
    binding = result.objects_to_create[1]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "multinode-operator-mirror"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llama-mirror", "namespace": "ml"}]


def test_a_running_mirror_is_left_alone_and_a_failed_one_replaced() -> None:
    assert run(job(), [], mirror=running_mirror()).objects_to_create == []
    failed = run(job(), [], mirror=running_mirror("Failed"))
    assert "llama-mirror" in failed.pods_to_delete and failed.objects_to_create == []


def test_first_start_resumes_from_nothing_or_from_resume_from() -> None:
    fresh = run(job(), [])
    assert env(fresh.pods_to_create[0])["MULTINODE_RESUME_FROM"] == ""
    assert fresh.status.resumed_from is None

    by_path = run(job(resumeFrom={"path": "/checkpoints/warmup/checkpoint-9"}), [])
    assert env(by_path.pods_to_create[1])["MULTINODE_RESUME_FROM"] == "/checkpoints/warmup/checkpoint-9"

    by_job = run(job(resumeFrom={"trainingJob": "warmup"}), [], resume_source_latest="/checkpoints/warmup/ckpt-5")
    assert env(by_job.pods_to_create[0])["BT_LOAD_CHECKPOINT_DIR"] == "/checkpoints/warmup/ckpt-5"
    assert by_job.status.resumed_from == "/checkpoints/warmup/ckpt-5"


def test_own_latest_mirrored_checkpoint_wins_over_resume_from() -> None:
    result = run(job(checkpoints={"latest": LATEST}, resumeFrom={"path": "/checkpoints/warmup/x"}), [])

    assert {env(p)["MULTINODE_RESUME_FROM"] for p in result.pods_to_create} == {LATEST["path"]}


def test_pods_of_one_attempt_agree_on_the_resume_path_even_if_a_newer_checkpoint_appeared() -> None:
    existing = pod(0, "Pending", node=None, resume_from="/checkpoints/llama/checkpoint-200")
    result = run(job(checkpoints={"latest": LATEST}), [existing])

    assert [env(p)["MULTINODE_RESUME_FROM"] for p in result.pods_to_create] == ["/checkpoints/llama/checkpoint-200"]


def test_the_next_attempt_resumes_from_the_latest_mirrored_checkpoint() -> None:
    base = stored_job(2, cache={"claimName": "c"}, checkpointing={"claimName": "k"},
                    failurePolicy={"backoff": {"initialSeconds": 0}})
    restarting = fail_node_1(base)
    latest = {"name": "checkpoint-700", "path": "/checkpoints/llama/checkpoint-700", "step": 700, "bytes": 1,
              "mirroredAt": "2026-11-20T11:59:00Z"}
    job = TrainingJob.model_validate({**base.model_dump(by_alias=True, exclude_none=True),
                                      "status": {"checkpoints": {"latest": latest}}})

    next_attempt = run(job, [], previous=restarting.status)

    assert {env(p)["MULTINODE_RESUME_FROM"] for p in next_attempt.pods_to_create} == {latest["path"]}
    assert next_attempt.status.resumed_from == latest["path"]


def test_the_operator_never_writes_the_mirrors_status() -> None:
    from multinode.controller.status_patch import dump_status as _dump

    result = run(job(checkpoints={"latest": LATEST}), [])
    assert result.status.checkpoints.latest.name == "checkpoint-300"
    assert "checkpoints" not in _dump(result.status)


PULLING = ObservedMirror(name="llama-mirror", job_name="llama", phase="Pending", waiting=Wait(
    "ImagePullBackOff", 'Back-off pulling image "ghcr.io/multinode/operator:0.1.0"', "mirror",
    "ghcr.io/multinode/operator:0.1.0"))


@pytest.mark.parametrize(("checkpointed", "mirror", "condition_"), [
    (job(), None, None),                                          # not written before the pod exists
    (job(), running_mirror("Pending"), ("False", "MirrorStarting")),
    (job(), PULLING, ("False", "ImagePullFailing")),
    (job(), running_mirror(), ("True", "MirrorRunning")),
    (job(), running_mirror("Failed"), None),                      # about to be replaced: CheckpointsSynced says more
    (stored_job(2), running_mirror(), None),                      # no checkpointing, no mirror condition
])
def test_the_checkpoint_mirror_condition_says_what_keeps_the_mirror_from_running(checkpointed, mirror,
                                                                                 condition_) -> None:
    decided = report_mirror(checkpointed, mirror)
    assert [(c.type, c.status, c.reason) for c in decided.conditions] == (
        [("CheckpointMirror", *condition_)] if condition_ else [])
    if mirror is PULLING:
        message = decided.conditions[0].message
        assert message.startswith("llama-mirror: the mirror image ghcr.io/multinode/operator:0.1.0 cannot be pulled")
        assert "the chart's image.repository and image.tag set it" in message


def mirror_on(node: str, phase: str = "Running", terminating: bool = False) -> ObservedMirror:
    return ObservedMirror(name="llama-mirror", job_name="llama", phase=phase, terminating=terminating, node=node)


def down_since(seconds_ago: float, status: str = "Unknown") -> dict[str, NodeDown]:
    return {"cpu-node-7": NodeDown(status, rfc3339(NOW - timedelta(seconds=seconds_ago)))}


def test_a_mirror_on_a_node_that_stopped_answering_is_replaced_once_its_toleration_runs_out() -> None:
    lossy = stored_job(2, cache={"claimName": "cache"}, checkpointing={"claimName": "ckpt"},
                       failurePolicy={"nodeLossTolerationSeconds": 40},
                       podTemplate={"tolerations": [{"operator": "Exists"}]})   # the trainers tolerate it for ever
    pods = [pod(0), pod(1)]

    waiting = run(lossy, pods, mirror=mirror_on("cpu-node-7"), down_nodes=down_since(30))
    assert waiting.pods_to_force_delete == [] and waiting.requeue_after is not None and waiting.requeue_after <= 10

    lost = run(lossy, pods, mirror=mirror_on("cpu-node-7"), down_nodes=down_since(41))
    assert lost.pods_to_force_delete == ["llama-mirror"] and lost.objects_to_create == []
    assert any(e.reason == "PodForceDeleted" and "mirror" in e.message for e in lost.events)

    # Deleted: the next pass makes a new mirror (the scheduler places it on a node that answers).
    replaced = run(lossy, pods, mirror=None, down_nodes=down_since(45))
    assert [o["kind"] for o in replaced.objects_to_create][-1] == "Pod"


@pytest.mark.parametrize(("mirror", "down", "forced", "requeue"), [
    (mirror_on("cpu-node-7", terminating=True), down_since(1, "False"), True, None),  # evicted there: at once
    (mirror_on("cpu-node-7"), {"cpu-node-7": NodeDown(GONE)}, True, None),           # its node is gone
    (mirror_on("cpu-node-7"), {}, False, None),
    (mirror_on("cpu-node-7"), down_since(1, "False"), False, pytest.approx(4.0)),     # within its toleration
    (mirror_on("cpu-node-7", "Succeeded"), {"cpu-node-7": NodeDown(GONE)}, False, None),  # exited: holds nothing
])
def test_a_mirror_evicted_or_on_a_node_that_is_gone_is_force_deleted_at_once(mirror, down, forced, requeue) -> None:
    decided = mirror_on_lost_node(job(), mirror, down, NOW)
    assert decided.force_delete == (("llama-mirror",) if forced else ()) and decided.requeue_after == requeue
    assert [e.reason for e in decided.events] == (["PodForceDeleted"] if forced else [])


def resumer(name: str, path: str | None, finished: bool = False) -> Resumer:
    return Resumer(name=name, finished=finished, resumed_from=path)


def test_the_checkpoints_other_running_jobs_resumed_from_go_into_resumed_by() -> None:
    result = run(job(), [pod(0), pod(1)], mirror=running_mirror(), resumers=(
        resumer("finetune-b", "/checkpoints/llama/checkpoint-300"),
        resumer("finetune-a", "/checkpoints/llama/checkpoint-300"),
        resumer("eval", "/checkpoints/llama/checkpoint-100"),
        resumer("done", "/checkpoints/llama/checkpoint-50", finished=True),       # reads nothing any more
        resumer("moved-on", "/checkpoints/moved-on/checkpoint-900"),            # resumed from its own since
        resumer("pending", None)))                                              # has not chosen yet

    assert [(r.path, r.training_job) for r in result.status.resumed_by] == [
        ("/checkpoints/llama/checkpoint-100", "eval"), ("/checkpoints/llama/checkpoint-300", "finetune-a")]
    assert run(job(), [pod(0), pod(1)], mirror=running_mirror()).status.resumed_by == []
