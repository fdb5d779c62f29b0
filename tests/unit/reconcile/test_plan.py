"""The planner: phases, failure wording, idempotence, and that a finished job is never recreated."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from multinode.api import Phase, TrainingJobStatus
from multinode.api.status import MAX_CONDITION_MESSAGE
from multinode.reconcile import Observed, ObservedPod, plan
from multinode.reconcile.status_report import fail_job
from multinode.render import RenderSettings
from tests.unit.render.render_job_factory import make_job

NOW = datetime(2026, 11, 20, 12, 0, 0, tzinfo=timezone.utc)
SETTINGS = RenderSettings()


def pod(index: int, phase: str = "Running", *, attempt: int = 0, node: str | None = "gpu-node-0", **kw) -> ObservedPod:
    kw.setdefault("ready", phase == "Running")
    return ObservedPod(name=f"llama-{index}-a{attempt}", job_name="llama", index=index, attempt=attempt,
                       phase=phase, node=node, **kw)


def run(job, pods, previous=None, service_exists=True, now=NOW, **observed):
    return plan(job, Observed(pods=tuple(pods), service_exists=service_exists, **observed),
                previous=previous, now=now, settings=SETTINGS)


def condition(status: TrainingJobStatus, type_: str):
    return next(c for c in status.conditions if c.type == type_)


def test_a_new_job_gets_its_service_and_every_pod_and_is_pending() -> None:
    result = run(make_job(3), [], service_exists=False)

    assert result.service["metadata"]["name"] == "llama"
    assert [p["metadata"]["name"] for p in result.pods_to_create] == ["llama-0-a0", "llama-1-a0", "llama-2-a0"]
    assert result.status.phase == Phase.PENDING
    assert result.status.start_time == "2026-11-20T12:00:00Z"
    assert condition(result.status, "Created").status == "False"
    assert [(e.type, e.reason) for e in result.events] == [("Normal", "CreatingPods")]


def test_replanning_after_the_creates_creates_nothing_more() -> None:
    first = run(make_job(3), [], service_exists=False)
    again = run(make_job(3), [pod(0, "Pending", node=None), pod(1, "Pending", node=None), pod(2, "Pending", node=None)],
                previous=first.status)

    assert again.service is None and again.pods_to_create == [] and again.pods_to_delete == []
    assert again.status.start_time == first.status.start_time
    assert again.status.phase == Phase.PENDING and again.events == []  # same phase: no second event


def test_only_the_missing_indices_are_created() -> None:
    result = run(make_job(4), [pod(0), pod(2)])

    assert [p["metadata"]["name"] for p in result.pods_to_create] == ["llama-1-a0", "llama-3-a0"]


def test_phase_walks_pending_starting_running() -> None:
    job = make_job(2)
    unscheduled = run(job, [pod(0, "Pending", node=None), pod(1, "Pending")])
    starting = run(job, [pod(0, "Pending"), pod(1, "Running")], previous=unscheduled.status)
    running = run(job, [pod(0), pod(1)], previous=starting.status)

    assert unscheduled.status.phase == Phase.PENDING
    assert condition(unscheduled.status, "Running").reason == "WaitingForScheduling"
    assert starting.status.phase == Phase.STARTING
    assert condition(starting.status, "Running").message == "1/2 pods running; the rest are scheduled and starting"
    assert running.status.phase == Phase.RUNNING
    assert (running.status.ready_nodes, running.status.ready) == (2, "2/2")
    assert condition(running.status, "Running").status == "True"
    assert [n.node for n in running.status.node_statuses] == ["gpu-node-0", "gpu-node-0"]


def test_unschedulable_pods_are_explained_with_the_schedulers_words() -> None:
    message = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    result = run(make_job(2), [pod(0, "Pending", node=None, unschedulable=message), pod(1, "Pending", node=None)])

    running = condition(result.status, "Running")
    assert result.status.phase == Phase.PENDING
    assert running.reason == "Unschedulable"
    assert running.message == f"1/2 pods cannot be scheduled; llama-0-a0: {message}"


def test_a_failed_pod_with_a_fail_job_rule_fails_the_job_names_it_and_stops_the_others() -> None:
    job = make_job(3, failurePolicy={"rules": [{"action": "FailJob", "onExitCodes": [{"min": 3, "max": 3}]}]})
    running = run(job, [pod(0), pod(1), pod(2)])
    later = NOW + timedelta(minutes=5)
    failed = run(job, [pod(0), pod(1, "Failed", exit_code=3, reason="Error"), pod(2)], previous=running.status, now=later)

    assert failed.status.phase == Phase.FAILED
    cond = condition(failed.status, "Failed")
    assert (cond.status, cond.reason) == ("True", "PodFailed")
    assert cond.message == ("pod llama-1-a0 (node 1) failed: exit code 3, reason Error "
                            "(failurePolicy.rules[0]: FailJob)")
    assert failed.pods_to_delete == ["llama-0-a0", "llama-2-a0"]
    assert failed.status.completion_time == "2026-11-20T12:05:00Z"
    assert [(e.type, e.reason) for e in failed.events] == [("Warning", "PodFailed")]


def test_a_pod_that_vanished_after_being_seen_restarts_the_gang_without_counting() -> None:
    job = make_job(2)
    running = run(job, [pod(0), pod(1)])
    after_eviction = run(job, [pod(0)], previous=running.status)

    assert after_eviction.pods_to_create == [], "never one pod recreated alone"
    assert after_eviction.pods_to_delete == ["llama-0-a0"]
    status = after_eviction.status
    assert (status.phase, status.attempt, status.restarts, status.uncounted_restarts) == (Phase.RESTARTING, 1, 0, 1)
    assert status.restart_history[-1].reason == "NodeLost" and not status.restart_history[-1].counted


def test_a_pod_evicted_from_a_dead_node_restarts_the_gang_without_waiting_for_it_to_go() -> None:
    # A dead kubelet never confirms the deletion: the pod stays Terminating, phase Running, for good.
    job = make_job(2)
    running = run(job, [pod(0), pod(1)])
    evicted = run(job, [pod(0), pod(1, terminating=True, disruption="DeletionByTaintManager")], previous=running.status)

    assert evicted.pods_to_create == []
    assert evicted.pods_to_delete == ["llama-0-a0"], "the terminating pod is already on its way out"
    status = evicted.status
    assert (status.phase, status.attempt, status.restarts, status.uncounted_restarts) == (Phase.RESTARTING, 1, 0, 1)
    record = status.restart_history[-1]
    assert (record.reason, record.counted) == ("NodeLost", False)
    assert "llama-1-a0" in record.message and "DeletionByTaintManager" in record.message


def test_a_finished_job_is_never_recreated_even_with_no_pods_left() -> None:
    job = make_job(2)
    done = run(job, [pod(0, "Succeeded"), pod(1, "Succeeded")])
    assert done.status.phase == Phase.SUCCEEDED

    after_cleanup = run(job, [], previous=done.status, service_exists=False)

    assert after_cleanup.pods_to_create == [] and after_cleanup.service is None
    assert after_cleanup.status.phase == Phase.SUCCEEDED and after_cleanup.events == []


def test_leader_only_success_stops_the_workers() -> None:
    job = make_job(3, successPolicy="LeaderOnly")
    result = run(job, [pod(0, "Succeeded"), pod(1), pod(2)])

    assert result.status.phase == Phase.SUCCEEDED
    assert condition(result.status, "Succeeded").reason == "LeaderSucceeded"
    assert result.pods_to_delete == ["llama-1-a0", "llama-2-a0"]


def test_all_nodes_policy_waits_for_every_pod() -> None:
    result = run(make_job(2), [pod(0, "Succeeded"), pod(1)])

    assert result.status.phase == Phase.RUNNING


def test_pods_of_another_attempt_are_not_counted() -> None:
    result = run(make_job(2), [pod(0, attempt=1), pod(1, attempt=1)])

    assert len(result.pods_to_create) == 2


def test_last_transition_time_moves_only_when_the_status_flips() -> None:
    job = make_job(2)
    first = run(job, [pod(0, "Pending", node=None), pod(1, "Pending", node=None)])
    later = run(job, [pod(0, "Pending"), pod(1, "Running")], previous=first.status, now=NOW + timedelta(seconds=30))

    before, after = condition(first.status, "Running"), condition(later.status, "Running")
    assert before.message != after.message
    assert after.last_transition_time == before.last_transition_time == "2026-11-20T12:00:00Z"


def test_fail_job_keeps_nothing_running_and_says_why() -> None:
    result = run(make_job(2), [pod(0)])

    failed = fail_job(result, "PodCreationFailed", "spec.volumes[0]: Invalid value", now=NOW, pods=[pod(0)])

    assert failed.pods_to_create == [] and failed.pods_to_delete == ["llama-0-a0"]
    assert failed.status.phase == Phase.FAILED
    assert condition(failed.status, "Failed").message == "spec.volumes[0]: Invalid value"


def test_fail_job_with_a_message_too_long_for_a_condition_keeps_its_start() -> None:
    # The apiserver echoes invalid values: a 70,000-character pod label key makes a 70,000-character refusal.
    refusal = 'Pod "llama-0-a0" is invalid: metadata.labels: Invalid value: "' + "b" * 70_000 + '"'
    failed = fail_job(run(make_job(2), []), "PodCreationFailed", refusal, now=NOW, pods=[])

    message = condition(failed.status, "Failed").message
    assert len(message) == MAX_CONDITION_MESSAGE and message.endswith("(truncated)")
    assert message.startswith('Pod "llama-0-a0" is invalid: metadata.labels: Invalid value: "bbb')


def test_old_pods_stuck_terminating_on_a_node_that_is_not_ready_are_force_deleted_and_do_not_block() -> None:
    job = make_job(2)  # BlockingRecreate by default: the next attempt waits for the old pods
    running = run(job, [pod(0), pod(1)])
    restarting = run(job, [pod(0), pod(1, terminating=True, node="dead")], previous=running.status)
    assert restarting.status.attempt == 1
    old = [pod(0, terminating=True), pod(1, terminating=True, node="dead")]

    later = NOW + timedelta(minutes=1)
    waiting = run(job, old, previous=restarting.status, now=later)
    assert waiting.pods_to_force_delete == [] and waiting.pods_to_create == [], "without node facts, it waits"

    stuck = run(job, old, previous=restarting.status, now=later, unreachable_nodes=frozenset({"dead"}))
    assert stuck.pods_to_force_delete == ["llama-1-a0"]
    assert [(e.type, e.reason) for e in stuck.events] == [("Warning", "PodForceDeleted")]
    assert stuck.pods_to_create == [], "llama-0-a0 on a Ready node is still on its way out"

    both_dead = [pod(0, terminating=True, node="dead"), pod(1, terminating=True, node="dead")]
    freed = run(job, both_dead, previous=restarting.status, now=later, unreachable_nodes=frozenset({"dead"}))
    assert sorted(freed.pods_to_force_delete) == ["llama-0-a0", "llama-1-a0"]
    assert [p["metadata"]["name"] for p in freed.pods_to_create] == ["llama-0-a1", "llama-1-a1"]
