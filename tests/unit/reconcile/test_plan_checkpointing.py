"""Planning with checkpointing: the mirror's objects, resume paths, and the final-sync gate."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase, TrainingJob
from multinode.reconcile import ObservedMirror
from tests.unit.reconcile.test_plan import NOW, condition, pod, run
from tests.unit.render.render_job_factory import make_job

LATEST = {"name": "checkpoint-300", "path": "/checkpoints/llama/checkpoint-300", "step": 300, "bytes": 10,
          "mirroredAt": "2026-11-20T11:00:00Z"}


def job(checkpoints: dict | None = None, **checkpointing) -> TrainingJob:
    """A 2-node checkpointed job; `checkpoints` is what its mirror has reported in status."""
    base = make_job(2, cache={"claimName": "cache"}, checkpointing={"claimName": "ckpt", **checkpointing})
    if checkpoints is None:
        return base
    return TrainingJob.model_validate({**base.model_dump(by_alias=True, exclude_none=True),
                                       "status": {"checkpoints": checkpoints}})


def env(pod_manifest: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod_manifest["spec"]["containers"][0]["env"]}


def running_mirror(phase: str = "Running") -> ObservedMirror:
    return ObservedMirror(name="llama-mirror", job_name="llama", phase=phase)


def test_mirror_identity_then_pod_are_created_with_the_job() -> None:
    result = run(job(), [])

    assert [(o["kind"], o["metadata"]["name"]) for o in result.objects_to_create] == [
        ("ServiceAccount", "llama-mirror"), ("Role", "llama-mirror"), ("RoleBinding", "llama-mirror"),
        ("Pod", "llama-mirror")]
    role = result.objects_to_create[1]
    assert role["rules"] == [{"apiGroups": ["multinode.dev"], "resources": ["trainingjobs/status"],
                              "resourceNames": ["llama"], "verbs": ["get", "patch"]}]


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
    assert condition(failing.status, "CheckpointsSynced").reason == "FinalSyncRequested"


def test_final_sync_times_out_into_the_terminal_phase() -> None:
    done_pods = [pod(0, "Succeeded"), pod(1, "Succeeded")]
    waiting = run(job(finalSyncTimeoutSeconds=60), done_pods, mirror=running_mirror())
    timed_out = run(job(finalSyncTimeoutSeconds=60), done_pods, previous=waiting.status,
                    mirror=running_mirror(), now=NOW + timedelta(seconds=61))

    assert timed_out.status.phase == Phase.SUCCEEDED
    synced = condition(timed_out.status, "CheckpointsSynced")
    assert (synced.status, synced.reason) == ("False", "FinalSyncTimedOut")
    assert "llama-mirror" in timed_out.pods_to_delete


def test_the_operator_never_writes_the_mirrors_status() -> None:
    from multinode.controller.worker import _dump

    result = run(job(checkpoints={"latest": LATEST}), [])
    assert result.status.checkpoints.latest.name == "checkpoint-300"
    assert "checkpoints" not in _dump(result.status)
