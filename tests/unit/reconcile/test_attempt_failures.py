"""The attempt's failure detectors (attempt_failures.py), called directly: which failure is the attempt's cause
when several apply, and what the detectors before the first failure still set."""

from __future__ import annotations

from datetime import timedelta

import pytest

from multinode.api import TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.timestamps import rfc3339
from multinode.reconcile.attempt_failures import ATTEMPT_FAILURES, attempt_failure
from multinode.reconcile.node_loss import NodeDown
from multinode.reconcile.observed import Observed
from multinode.reconcile.progress import JobProgress, RankProgress
from multinode.testing import observed_pod as pod
from multinode.testing import stored_job
from tests.unit.reconcile.planning import NOW

JOB = stored_job(2, hangDetection={"timeoutSeconds": 30}, startupTimeoutSeconds=60)
LEADER_ONLY = stored_job(2, successPolicy="LeaderOnly")
STARTED = rfc3339(NOW - timedelta(seconds=120))
SEEN_BOTH = TrainingJobStatus.model_validate({"nodeStatuses": [
    {"index": 0, "pod": "llama-0-a0", "phase": "Running"}, {"index": 1, "pod": "llama-1-a0", "phase": "Running"}]})
DOWN = {"dead": NodeDown("False", rfc3339(NOW - timedelta(seconds=60)))}
SILENT = JobProgress(0, (RankProgress(0, "n0", 1, NOW - timedelta(seconds=90)),
                         RankProgress(1, "dead", 1, NOW - timedelta(seconds=90))), None, NOW)


def running(index: int, **kw):
    kw.setdefault("node", "n0" if index == 0 else "dead")
    return pod(index, started_at=STARTED, **kw)


@pytest.mark.parametrize(("job", "before", "current", "observed", "reason"), [
    # A failed pod is the cause, whatever else went wrong with its peers.
    (JOB, SEEN_BOTH, {0: running(0, phase="Failed", exit_code=1), 1: running(1, terminating=True)},
     Observed(down_nodes=DOWN, progress=SILENT), Reason.POD_FAILED),
    # A pod gone between two passes before one evicted or on a down node.
    (JOB, SEEN_BOTH, {1: running(1, terminating=True)}, Observed(down_nodes=DOWN), Reason.NODE_LOST),
    (JOB, TrainingJobStatus(), {0: running(0), 1: running(1, terminating=True, disruption="EvictionByEvictionAPI")},
     Observed(down_nodes=DOWN), Reason.NODE_LOST),
    # A pod on a node down past its toleration before a hang.
    (JOB, TrainingJobStatus(), {0: running(0), 1: running(1)}, Observed(down_nodes=DOWN, progress=SILENT),
     Reason.NODE_LOST),
    (JOB, TrainingJobStatus(), {0: running(0), 1: running(1)}, Observed(progress=SILENT), Reason.HUNG),
    # The startup timeout: pods bound long ago and not running.
    (JOB, TrainingJobStatus(attempt_scheduled_time=STARTED), {0: running(0, phase="Pending")}, Observed(),
     Reason.STARTUP_TIMEOUT),
    # Once the leader succeeded under LeaderOnly, lost and failed peers are no failure.
    (LEADER_ONLY, SEEN_BOTH, {0: running(0, phase="Succeeded"), 1: running(1, phase="Failed", exit_code=1)},
     Observed(down_nodes=DOWN), None),
    (JOB, TrainingJobStatus(), {0: running(0), 1: running(1)}, Observed(), None),
])
def test_the_first_failure_found_is_the_attempts_cause(job, before, current, observed, reason) -> None:
    decided = attempt_failure(job, before, before, current, observed, NOW)
    assert (decided.failure.reason if decided.failure else None) == reason


def test_detectors_before_the_first_failure_still_set_their_timers_and_later_ones_do_not_run() -> None:
    # Node 1's node is down within its toleration (a timer); then the startup timeout fails the attempt. The
    # hang detector, after it, sets nothing.
    job = stored_job(2, failurePolicy={"nodeLossTolerationSeconds": 100}, hangDetection={"timeoutSeconds": 30},
                     startupTimeoutSeconds=60)
    current = {0: running(0, phase="Pending"), 1: running(1)}
    decided = attempt_failure(job, TrainingJobStatus(attempt_scheduled_time=STARTED), TrainingJobStatus(), current,
                              Observed(down_nodes=DOWN, progress=SILENT), NOW)
    assert decided.failure is not None and decided.failure.reason == Reason.STARTUP_TIMEOUT
    assert decided.requeue_after == pytest.approx(40.0) and decided.conditions == ()


def test_the_detectors_run_in_their_documented_order() -> None:
    assert [d.__name__ for d in ATTEMPT_FAILURES] == [
        "failed_pod", "lost_pod", "evicted_pod", "pod_on_down_node", "image_digests", "startup", "hang"]
