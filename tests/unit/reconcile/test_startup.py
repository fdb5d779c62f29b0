"""Startup (startup.py): why pods are not running yet, and the startup timeout."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from tests.unit.reconcile.planning import NOW, condition, pod, run
from localcluster.harness.trainingjobs import stored_job


def test_startup_timeout_fails_the_attempt_with_the_reason_it_was_stuck() -> None:
    job = stored_job(2, startupTimeoutSeconds=60)
    created = run(job, [])
    stuck = [pod(0),
             pod(1, "Pending", node=None, unschedulable="0/8 nodes are available: 8 Insufficient nvidia.com/gpu")]

    early = run(job, stuck, previous=created.status, now=NOW + timedelta(seconds=30))
    assert early.status.phase == Phase.PENDING and early.requeue_after == 30.0

    late = run(job, stuck, previous=created.status, now=NOW + timedelta(seconds=61))
    assert late.status.phase == Phase.RESTARTING
    record = late.status.restart_history[-1]
    assert record.reason == "StartupTimeout" and "Insufficient nvidia.com/gpu" in record.message


def test_image_pull_failures_are_named_while_starting() -> None:
    stuck = pod(1, "Pending", waiting_reason="ImagePullBackOff", waiting_message='Back-off pulling image "x"')
    result = run(stored_job(2), [pod(0), stuck])

    cond = condition(result.status, "Running")
    assert result.status.phase == Phase.STARTING and cond.reason == "ImagePullFailing"
    assert "llama-1-a0: ImagePullBackOff" in cond.message
