"""Gang restarts: policy, budget, backoff, blocking recreate, resume, and same code on every node."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from tests.unit.reconcile.test_plan import NOW, condition, pod, run
from tests.unit.render.render_job_factory import make_job

DIGEST_A = "registry/train@sha256:" + "a" * 64
DIGEST_B = "registry/train@sha256:" + "b" * 64


def env(manifest: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in manifest["spec"]["containers"][0]["env"]}


def fail_node_1(job, exit_code=1, **kw):
    running = run(job, [pod(0), pod(1)])
    return run(job, [pod(0), pod(1, "Failed", exit_code=exit_code, reason="Error", **kw)], previous=running.status)


def test_a_retryable_failure_restarts_the_whole_gang_counted_with_backoff() -> None:
    restarting = fail_node_1(make_job(2))

    s = restarting.status
    assert (s.phase, s.attempt, s.restarts, s.uncounted_restarts) == (Phase.RESTARTING, 1, 1, 0)
    assert restarting.pods_to_delete == ["llama-0-a0"], "the healthy node goes too"
    assert restarting.pods_to_create == []
    assert s.next_attempt_time == "2026-11-20T12:00:05Z" and restarting.requeue_after == 5.0
    record = s.restart_history[-1]
    assert (record.attempt, record.reason, record.counted) == (0, "PodFailed", True)
    [event] = restarting.events
    assert (event.type, event.reason) == ("Warning", "Restarting")
    assert "restart 1/3" in event.message and "attempt 1 in 5s" in event.message


def test_blocking_recreate_waits_for_old_pods_then_for_the_backoff() -> None:
    job = make_job(2)
    restarting = fail_node_1(job)
    old = [pod(0, terminating=True), pod(1, "Failed", exit_code=1)]

    waiting = run(job, old, previous=restarting.status, now=NOW + timedelta(seconds=10))
    assert waiting.pods_to_create == []
    assert condition(waiting.status, "Running").reason == "WaitingForOldPods"

    backoff = run(job, [pod(1, "Failed", exit_code=1)], previous=restarting.status, now=NOW + timedelta(seconds=2))
    assert backoff.pods_to_create == [] and backoff.requeue_after == 3.0
    assert condition(backoff.status, "Running").reason == "Backoff"

    next_attempt = run(job, [pod(1, "Failed", exit_code=1)], previous=restarting.status, now=NOW + timedelta(seconds=6))
    assert [p["metadata"]["name"] for p in next_attempt.pods_to_create] == ["llama-0-a1", "llama-1-a1"]
    assert {env(p)["MULTINODE_RESTART_COUNT"] for p in next_attempt.pods_to_create} == {"1"}
    assert {env(p)["BT_RETRY_COUNT"] for p in next_attempt.pods_to_create} == {"1"}
    assert {p["metadata"]["labels"]["multinode.dev/attempt"] for p in next_attempt.pods_to_create} == {"1"}
    assert next_attempt.status.phase == Phase.PENDING


def test_recreate_does_not_wait_for_old_pods() -> None:
    job = make_job(2, failurePolicy={"restartStrategy": "Recreate", "backoff": {"initialSeconds": 0}})
    restarting = fail_node_1(job)

    again = run(job, [pod(0, terminating=True)], previous=restarting.status)

    assert len(again.pods_to_create) == 2


def test_the_next_attempt_resumes_from_the_latest_mirrored_checkpoint() -> None:
    from multinode.api import TrainingJob

    base = make_job(2, cache={"claimName": "c"}, checkpointing={"claimName": "k"},
                    failurePolicy={"backoff": {"initialSeconds": 0}})
    restarting = fail_node_1(base)
    latest = {"name": "checkpoint-700", "path": "/checkpoints/llama/checkpoint-700", "step": 700, "bytes": 1,
              "mirroredAt": "2026-11-20T11:59:00Z"}
    job = TrainingJob.model_validate({**base.model_dump(by_alias=True, exclude_none=True),
                                      "status": {"checkpoints": {"latest": latest}}})

    next_attempt = run(job, [], previous=restarting.status)

    assert {env(p)["MULTINODE_RESUME_FROM"] for p in next_attempt.pods_to_create} == {latest["path"]}
    assert next_attempt.status.resumed_from == latest["path"]


def test_backoff_doubles_and_is_capped() -> None:
    job = make_job(2, failurePolicy={"maxRestarts": 10, "backoff": {"initialSeconds": 10, "maxSeconds": 25}})
    status = None
    delays = []
    for attempt in range(4):
        running = run(job, [pod(0, attempt=attempt), pod(1, attempt=attempt)], previous=status)
        failed = run(job, [pod(0, attempt=attempt), pod(1, "Failed", attempt=attempt, exit_code=1)],
                     previous=running.status)
        delays.append(failed.requeue_after)
        status = failed.status
        status.next_attempt_time = None  # pretend the backoff passed
    assert delays == [10.0, 20.0, 25.0, 25.0]


def test_a_spent_budget_fails_the_job_naming_the_last_failure() -> None:
    job = make_job(2, failurePolicy={"maxRestarts": 1, "backoff": {"initialSeconds": 0}})
    first = fail_node_1(job)
    second_running = run(job, [pod(0, attempt=1), pod(1, attempt=1)], previous=first.status)
    failed = run(job, [pod(0, attempt=1, exit_code=None), pod(1, "Failed", attempt=1, exit_code=2, reason="Error")],
                 previous=second_running.status)

    assert failed.status.phase == Phase.FAILED
    cond = condition(failed.status, "Failed")
    assert cond.reason == "RestartLimitExceeded"
    assert cond.message == ("no restarts left (maxRestarts 1, 1 used); last failure: "
                            "pod llama-1-a1 (node 1) failed: exit code 2, reason Error")


def test_exit_codes_marked_permanent_fail_at_once() -> None:
    job = make_job(2, failurePolicy={"rules": [{"action": "FailJob", "onExitCodes": [{"min": 1, "max": 127}]}]})

    assert fail_node_1(job, exit_code=2).status.phase == Phase.FAILED
    assert fail_node_1(job, exit_code=137).status.phase == Phase.RESTARTING


def test_disruptions_restart_without_counting_by_default_and_rules_can_say_otherwise() -> None:
    evicted = fail_node_1(make_job(2), exit_code=143, disruption="DeletionByTaintManager")
    assert (evicted.status.restarts, evicted.status.uncounted_restarts) == (0, 1)

    strict = make_job(2, failurePolicy={"rules": [{"action": "Restart", "onNodeLoss": True}]})
    counted = fail_node_1(strict, exit_code=143, disruption="DeletionByTaintManager")
    assert (counted.status.restarts, counted.status.uncounted_restarts) == (1, 0)


def test_oom_can_be_matched_by_reason() -> None:
    job = make_job(2, failurePolicy={"rules": [{"action": "FailJob", "onReasons": ["OOMKilled"]}]})
    running = run(job, [pod(0), pod(1)])
    oom = run(job, [pod(0), pod(1, "Failed", exit_code=137, reason="OOMKilled")], previous=running.status)

    assert oom.status.phase == Phase.FAILED and "OOMKilled" in condition(oom.status, "Failed").message


def test_startup_timeout_fails_the_attempt_with_the_reason_it_was_stuck() -> None:
    job = make_job(2, startupTimeoutSeconds=60)
    created = run(job, [])
    stuck = [pod(0), pod(1, "Pending", node=None, unschedulable="0/8 nodes are available: 8 Insufficient nvidia.com/gpu")]

    early = run(job, stuck, previous=created.status, now=NOW + timedelta(seconds=30))
    assert early.status.phase == Phase.PENDING and early.requeue_after == 30.0

    late = run(job, stuck, previous=created.status, now=NOW + timedelta(seconds=61))
    assert late.status.phase == Phase.RESTARTING
    record = late.status.restart_history[-1]
    assert record.reason == "StartupTimeout" and "Insufficient nvidia.com/gpu" in record.message


def test_first_digest_is_recorded_and_pinned_for_the_next_attempt() -> None:
    job = make_job(2, failurePolicy={"backoff": {"initialSeconds": 0}})
    running = run(job, [pod(0, image_id=f"docker-pullable://{DIGEST_A}"), pod(1, image_id=DIGEST_A)])
    assert running.status.image_digest == DIGEST_A
    assert condition(running.status, "ImageConsistent").status == "True"

    failed = run(job, [pod(0, image_id=DIGEST_A), pod(1, "Failed", exit_code=1, image_id=DIGEST_A)],
                 previous=running.status)
    next_attempt = run(job, [], previous=failed.status)

    assert {p["spec"]["containers"][0]["image"] for p in next_attempt.pods_to_create} == {DIGEST_A}


def test_different_digests_in_one_attempt_fail_it_or_are_reported() -> None:
    mixed = [pod(0, image_id=DIGEST_A), pod(1, image_id=DIGEST_B)]

    failed = run(make_job(2), mixed)
    assert failed.status.phase == Phase.RESTARTING
    assert failed.status.restart_history[-1].reason == "ImageDigestMismatch"
    assert condition(failed.status, "ImageConsistent").status == "False"

    reported = run(make_job(2, imageConsistency={"onMismatch": "Report"}), mixed)
    assert reported.status.phase == Phase.RUNNING
    message = condition(reported.status, "ImageConsistent").message
    assert "llama-0-a0" in message and "llama-1-a0" in message


def test_image_pull_failures_are_named_while_starting() -> None:
    stuck = pod(1, "Pending", waiting_reason="ImagePullBackOff", waiting_message='Back-off pulling image "x"')
    result = run(make_job(2), [pod(0), stuck])

    cond = condition(result.status, "Running")
    assert result.status.phase == Phase.STARTING and cond.reason == "ImagePullFailing"
    assert "llama-1-a0: ImagePullBackOff" in cond.message
