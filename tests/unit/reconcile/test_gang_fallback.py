"""No partial gang kept for long without the native API (gang_fallback.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from multinode.api import Phase, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.status import GangMode, SchedulingStatus
from multinode.api.timestamps import rfc3339
from multinode.reconcile.decision import Decision
from multinode.reconcile.gang_fallback import release_partial_gang, wait_before_retry
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job

FULL = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def job(timeout: int = 60, initial: int = 5):
    return stored_job(3, scheduling={"partialGangTimeoutSeconds": timeout},
                      failurePolicy={"backoff": {"initialSeconds": initial, "maxSeconds": 300}})


def partial(attempt: int = 0):
    """Nodes 0 and 1 bound, node 2 unschedulable."""
    return [pod(0, attempt=attempt), pod(1, attempt=attempt),
            pod(2, "Pending", attempt=attempt, node=None, unschedulable=FULL)]


def started(j, attempt_pods=()):
    return run(j, list(attempt_pods), gang_api=False).status


def test_a_partial_gang_waits_for_capacity_until_the_timeout_and_comes_back_then() -> None:
    j = job(timeout=60)
    result = run(j, partial(), previous=started(j), gang_api=False)

    assert result.status.phase == Phase.PENDING and result.pods_to_delete == []
    gang = condition(result.status, "GangScheduled")
    assert (gang.status, gang.reason) == ("False", "WaitingForCapacity")
    assert gang.message.startswith("waiting for capacity for 3 nodes: 2/3 pods bound, 1 unschedulable")
    assert "released at 2026-11-20T12:01:00Z" in gang.message and FULL in gang.message
    assert condition(result.status, "Running").reason == "WaitingForCapacity"
    assert result.status.scheduling.partial_since == "2026-11-20T12:00:00Z"
    assert result.requeue_after == 60


def test_after_the_timeout_every_pod_is_released_as_a_new_attempt_that_is_not_a_restart() -> None:
    j = job(timeout=60, initial=5)
    waiting = run(j, partial(), previous=started(j), gang_api=False)
    later = NOW + timedelta(seconds=61)
    result = run(j, partial(), previous=waiting.status, now=later, gang_api=False)

    assert sorted(result.pods_to_delete) == ["llama-0-a0", "llama-1-a0", "llama-2-a0"]
    assert result.pods_to_create == []
    status = result.status
    assert (status.phase, status.attempt, status.restarts, status.uncounted_restarts) == (Phase.PENDING, 1, 0, 0)
    assert status.restart_history == [] and status.node_statuses[0].pod is None
    assert status.scheduling.releases == 1 and status.scheduling.partial_since is None
    assert status.scheduling.next_try_time == "2026-11-20T12:01:06Z"  # backoff: initialSeconds
    [event] = [e for e in result.events if e.reason == "PartialGangReleased"]
    assert event.type == "Warning" and "attempt 0 held 2 bound pods for 60s" in event.message
    assert condition(status, "GangScheduled").reason == "PartialGangReleased"


def test_the_next_attempt_waits_for_the_backoff_and_the_released_pods_then_starts_fresh() -> None:
    j = job(timeout=60, initial=5)
    waiting = run(j, partial(), previous=started(j), gang_api=False)
    released = run(j, partial(), previous=waiting.status, now=NOW + timedelta(seconds=61), gang_api=False)

    backoff = run(j, partial(), previous=released.status, now=NOW + timedelta(seconds=62), gang_api=False)
    assert backoff.pods_to_create == [] and backoff.requeue_after == 4
    assert condition(backoff.status, "Running").reason == "PartialGangReleased"

    terminating = [pod(i, attempt=0, terminating=True) for i in range(3)]
    lingering = run(j, terminating, previous=backoff.status, now=NOW + timedelta(seconds=70), gang_api=False)
    assert lingering.pods_to_create == [] and "3 released pods still terminating" in \
        condition(lingering.status, "Running").message

    fresh = run(j, [], previous=lingering.status, now=NOW + timedelta(seconds=71), gang_api=False)
    assert [p["metadata"]["name"] for p in fresh.pods_to_create] == ["llama-0-a1", "llama-1-a1", "llama-2-a1"]
    assert fresh.status.scheduling.next_try_time is None and fresh.status.scheduling.releases == 1


def test_the_backoff_doubles_with_each_release() -> None:
    j = job(timeout=10, initial=5)
    status = started(j)
    status.scheduling.releases = 2
    waiting = run(j, partial(), previous=status, gang_api=False)
    released = run(j, partial(), previous=waiting.status, now=NOW + timedelta(seconds=11), gang_api=False)
    assert released.status.scheduling.next_try_time == "2026-11-20T12:00:31Z"  # 5 * 2**2 = 20 s


def test_pods_all_unschedulable_hold_nothing_and_just_wait() -> None:
    j = job(timeout=1)
    none_bound = [pod(i, "Pending", node=None, unschedulable=FULL) for i in range(3)]
    result = run(j, none_bound, previous=started(j), now=NOW + timedelta(hours=1), gang_api=False)
    assert result.pods_to_delete == [] and result.status.attempt == 0
    gang = condition(result.status, "GangScheduled")
    assert gang.reason == "WaitingForCapacity" and "none bound (no GPU held" in gang.message


def test_a_gang_that_filled_up_in_time_is_placed_and_forgets_the_wait() -> None:
    j = job(timeout=60)
    waiting = run(j, partial(), previous=started(j), gang_api=False)
    placed = run(j, [pod(0), pod(1), pod(2)], previous=waiting.status, now=NOW + timedelta(seconds=30), gang_api=False)
    assert placed.status.phase == Phase.RUNNING and placed.status.scheduling.partial_since is None
    gang = condition(placed.status, "GangScheduled")
    assert (gang.status, gang.reason) == ("True", "GangPlaced") and "not ganged" in gang.message


def test_a_native_gang_is_never_released_by_the_fallback() -> None:
    j = job(timeout=1)
    first = run(j, [], gang_api=True)
    assert first.status.scheduling.gang == GangMode.POD_GROUP
    result = run(j, partial(), previous=first.status, now=NOW + timedelta(hours=1), gang_api=True)
    assert result.pods_to_delete == [] and result.status.attempt == 0


def test_the_wait_says_whether_the_cluster_or_the_job_turned_the_native_gang_off() -> None:
    served_but_opted_out = stored_job(3, scheduling={"nativePodGroup": False})
    result = run(served_but_opted_out, partial(), previous=started(served_but_opted_out), gang_api=True)
    assert "not ganged: spec.scheduling.nativePodGroup is false" in condition(result.status, "GangScheduled").message

    not_served = job()
    result = run(not_served, partial(), previous=started(not_served), gang_api=False)
    assert "the apiserver serves no scheduling.k8s.io/v1alpha2 PodGroup" in condition(result.status,
                                                                                      "GangScheduled").message


# The policies called directly.

def _fallback(**fields) -> TrainingJobStatus:
    return TrainingJobStatus(attempt=0, scheduling=SchedulingStatus(gang=GangMode.NONE, **fields))


def _at(seconds: int) -> str:
    return rfc3339(NOW + timedelta(seconds=seconds))


@pytest.mark.parametrize(("current", "since", "reason", "partial_since", "requeue", "released"), [
    # Nothing unschedulable and all bound: the judge decides, the gang is placed.
    ({i: pod(i) for i in range(3)}, _at(-10), None, None, None, False),
    # All unschedulable: nothing held, just waiting.
    ({i: pod(i, "Pending", node=None, unschedulable=FULL) for i in range(3)}, None, Reason.WAITING_FOR_CAPACITY,
     None, None, False),
    # Partly bound: the timeout starts now, and a timer for it.
    (dict(enumerate(partial())), None, Reason.WAITING_FOR_CAPACITY, _at(0), 60.0, False),
    (dict(enumerate(partial())), _at(-20), Reason.WAITING_FOR_CAPACITY, _at(-20), 40.0, False),
    # Partly bound for the whole timeout: released, a new attempt after the backoff.
    (dict(enumerate(partial())), _at(-60), Reason.PARTIAL_GANG_RELEASED, None, 5.0, True),
])
def test_a_partial_gang_is_released_after_its_timeout(current, since, reason, partial_since, requeue,
                                                      released) -> None:
    decided = release_partial_gang(job(timeout=60), _fallback(partial_since=since), current, NOW)
    assert (decided.verdict.reason if decided.verdict else None) == reason
    assert decided.status["scheduling"].partial_since == partial_since
    assert decided.requeue_after == requeue and decided.stop_creating == released
    if released:
        assert decided.status["attempt"] == 1 and decided.status["scheduling"].releases == 1
        assert decided.status["scheduling"].next_try_time == _at(5)
        assert decided.delete == ("llama-0-a0", "llama-1-a0", "llama-2-a0")
        assert [e.reason for e in decided.events] == [Reason.PARTIAL_GANG_RELEASED]
    else:
        assert "attempt" not in decided.status and not decided.delete and not decided.events
    gang = [(c.type, c.status, c.reason) for c in decided.conditions]
    assert gang == [("GangScheduled", "True" if reason is None else "False", reason or Reason.GANG_PLACED)]


def test_a_ganged_attempt_is_never_released() -> None:
    status = TrainingJobStatus(scheduling=SchedulingStatus(gang=GangMode.POD_GROUP, partial_since=_at(-600)))
    assert release_partial_gang(job(timeout=60), status, dict(enumerate(partial())), NOW) == Decision()


@pytest.mark.parametrize(("next_try", "older", "reason", "requeue"), [
    (None, [], None, None),                                              # no release pending
    (_at(30), [], Reason.PARTIAL_GANG_RELEASED, 30.0),                   # the backoff
    (_at(-1), [pod(0, terminating=True)], Reason.PARTIAL_GANG_RELEASED, None),  # released pods still there
    (_at(-1), [], None, None),                                           # free to create: the time is cleared
])
def test_after_a_release_the_next_attempt_waits_for_the_backoff_and_the_released_pods(next_try, older, reason,
                                                                                      requeue) -> None:
    decided = wait_before_retry(job(), _fallback(releases=1, next_try_time=next_try), older, NOW)
    assert (decided.verdict.reason if decided.verdict else None, decided.requeue_after) == (reason, requeue)
    if next_try is not None and reason is None:
        assert decided.status["scheduling"].next_try_time is None
