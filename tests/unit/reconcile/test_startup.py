"""Startup (startup.py): why pods are not running yet, and the startup timeout."""

from __future__ import annotations

import pytest

from multinode.api import TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.timestamps import rfc3339
from multinode.reconcile.decision import Decision
from multinode.reconcile.startup import note_first_bound, startup_timeout
from datetime import timedelta

from multinode.api import Phase
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job


UNSCHEDULABLE = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu"


def test_startup_timeout_counts_from_the_first_pod_bound_and_fails_the_attempt_with_why() -> None:
    job = stored_job(2, startupTimeoutSeconds=60)
    created = run(job, [])
    queued = [pod(i, "Pending", node=None, unschedulable=UNSCHEDULABLE) for i in range(2)]
    # Waiting for a place holds no GPU: an hour of it does not count.
    waiting = run(job, queued, previous=created.status, now=NOW + timedelta(hours=1))
    assert waiting.status.phase == Phase.PENDING and waiting.status.attempt_scheduled_time is None

    bound_at = NOW + timedelta(hours=1, seconds=10)
    stuck = [pod(0, "Pending"), pod(1, "Pending", node=None, unschedulable=UNSCHEDULABLE)]
    bound = run(job, stuck, previous=waiting.status, now=bound_at)
    assert bound.status.attempt_scheduled_time == "2026-11-20T13:00:10Z" and bound.requeue_after == 60.0

    early = run(job, stuck, previous=bound.status, now=bound_at + timedelta(seconds=30))
    assert early.status.phase == Phase.PENDING and early.requeue_after == 30.0

    late = run(job, stuck, previous=bound.status, now=bound_at + timedelta(seconds=61))
    assert late.status.phase == Phase.RESTARTING
    record = late.status.restart_history[-1]
    assert record.reason == "StartupTimeout" and "Insufficient nvidia.com/gpu" in record.message
    assert "60s after the first was bound to a node" in record.message
    assert late.status.attempt_scheduled_time is None  # the next attempt counts afresh


def test_the_default_startup_timeout_is_half_an_hour_and_0_turns_it_off() -> None:
    stuck = [pod(0), pod(1, "Pending", waiting_reason="ImagePullBackOff")]
    default = stored_job(2)
    assert default.spec.startup_timeout_seconds == 1800
    bound = run(default, stuck)
    assert run(default, stuck, previous=bound.status, now=NOW + timedelta(minutes=29)).status.phase == Phase.STARTING
    assert run(default, stuck, previous=bound.status, now=NOW + timedelta(minutes=30)).status.phase == Phase.RESTARTING

    never = stored_job(2, startupTimeoutSeconds=0)
    bound = run(never, stuck)
    assert run(never, stuck, previous=bound.status, now=NOW + timedelta(days=2)).status.phase == Phase.STARTING


def test_image_pull_failures_name_the_image_and_where_it_is_set() -> None:
    trainer = pod(1, "Pending", waiting_reason="ImagePullBackOff", waiting_message='Back-off pulling image "x"',
                  waiting_container="trainer", waiting_image="registry.example/train:1.0")
    result = run(stored_job(2), [pod(0), trainer])
    cond = condition(result.status, "Running")
    assert result.status.phase == Phase.STARTING and cond.reason == "ImagePullFailing"
    assert ("llama-1-a0: the trainer image registry.example/train:1.0 (spec.image) cannot be pulled "
            "(ImagePullBackOff: Back-off pulling image \"x\")") in cond.message

    preflight = pod(1, "Pending", waiting_reason="ErrImagePull", waiting_message="not found",
                    waiting_container="preflight", waiting_image="ghcr.io/multinode/operator:0.1.0")
    cond = condition(run(stored_job(2), [pod(0), preflight]).status, "Running")
    assert cond.reason == "ImagePullFailing"
    assert ("the preflight image ghcr.io/multinode/operator:0.1.0 cannot be pulled (ErrImagePull: not found)"
            in cond.message)
    assert "the chart's image.repository and image.tag set it" in cond.message


def test_a_pod_waiting_for_another_reason_keeps_kubernetes_words() -> None:
    unmountable = pod(1, "Pending", waiting_reason="CreateContainerConfigError",
                      waiting_message='secret "hf-token" not found', waiting_container="trainer",
                      waiting_image="registry.example/train:1.0")
    cond = condition(run(stored_job(2), [pod(0), unmountable]).status, "Running")
    assert cond.reason == "ContainerConfigError"
    assert 'llama-1-a0: CreateContainerConfigError: secret "hf-token" not found' in cond.message


def test_in_a_topology_domain_the_operator_chose_the_wait_counts_from_the_attempts_start() -> None:
    # The domain may be full: a timeout lets the next attempt choose another, bound pods or not.
    from multinode.reconcile.placement import ObservedNode

    job = stored_job(2, startupTimeoutSeconds=60, topology={"sameDomainLabel": "block"})
    nodes = tuple(ObservedNode(f"n{i}", {"block": "a"}) for i in range(2))
    created = run(job, [], nodes=nodes)
    assert created.status.topology_domain == "a"
    queued = [pod(i, "Pending", node=None, unschedulable=UNSCHEDULABLE) for i in range(2)]
    late = run(job, queued, previous=created.status, nodes=nodes, now=NOW + timedelta(seconds=61))
    assert late.status.phase == Phase.RESTARTING and late.status.restart_history[-1].reason == "StartupTimeout"


# The policies called directly.

def _ago(seconds: int) -> str:
    return rfc3339(NOW - timedelta(seconds=seconds))


@pytest.mark.parametrize(("status", "current", "failed", "requeue"), [
    (TrainingJobStatus(), {0: pod(0, "Pending")}, False, None),                                   # never bound
    (TrainingJobStatus(attempt_scheduled_time=_ago(100)), {0: pod(0, "Pending")}, False, 500.0),
    (TrainingJobStatus(attempt_scheduled_time=_ago(600)), {0: pod(0, "Pending")}, True, None),
    (TrainingJobStatus(attempt_scheduled_time=_ago(600)), {0: pod(0), 1: pod(1)}, False, None),   # all running
    # A domain the operator chose counts from the attempt's start.
    (TrainingJobStatus(topology_domain="b", attempt_start_time=_ago(601)), {}, True, None),
])
def test_the_startup_timeout_fails_an_attempt_stuck_before_running(status, current, failed, requeue) -> None:
    decided = startup_timeout(stored_job(2, startupTimeoutSeconds=600), status, current, NOW,
                              why_not_running=lambda: "image pull")
    assert decided.requeue_after == requeue
    assert (decided.failure is not None) == failed
    if failed:
        assert decided.failure.reason == Reason.STARTUP_TIMEOUT and decided.failure.message.endswith("image pull")


@pytest.mark.parametrize(("status", "current", "decided"), [
    (TrainingJobStatus(), {0: pod(0, "Pending", node=None)}, Decision()),
    (TrainingJobStatus(), {0: pod(0, "Pending")}, Decision(status={"attempt_scheduled_time": rfc3339(NOW)})),
    (TrainingJobStatus(attempt_scheduled_time="2026-11-20T11:00:00Z"), {0: pod(0)}, Decision()),
])
def test_the_first_bound_pod_is_noted_once(status, current, decided) -> None:
    assert note_first_bound(status, current, NOW) == decided
