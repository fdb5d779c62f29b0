"""No partial gang kept for long without the native API (gang_fallback.py)."""

from __future__ import annotations

from datetime import timedelta

from multinode.api import Phase
from multinode.api.status import GangMode
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
