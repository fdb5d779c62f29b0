"""Leader election rules (client-go's), as pure functions of the observed Lease and the time."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multinode.reconcile.leadership import (
    Action,
    LeaseRecord,
    LeaseTimings,
    Observation,
    may_try_again,
    must_stop,
    next_step,
    observe,
    released,
)

WALL = datetime(2026, 11, 24, 23, 0, 0, 123456, tzinfo=timezone.utc)
STAMP = "2026-11-24T23:00:00.123456Z"
T = LeaseTimings()


def held_by(holder: str, duration: int = 15, transitions: int = 2) -> LeaseRecord:
    return LeaseRecord(holder, duration, "2026-11-24T22:00:00.000000Z", "2026-11-24T22:59:59.000000Z", transitions)


def test_no_lease_is_created_held_by_us() -> None:
    step = next_step("me", Observation(None, 0.0), 5.0, WALL, T)
    assert step.action is Action.CREATE
    assert step.record == LeaseRecord("me", 15, STAMP, STAMP, 0)


def test_own_lease_is_renewed_keeping_acquire_time_and_transitions() -> None:
    mine = held_by("me")
    step = next_step("me", Observation(mine, 0.0), 1000.0, WALL, T)
    assert step.action is Action.RENEW
    assert step.record == LeaseRecord("me", 15, mine.acquire_time, STAMP, 2)


def test_someone_elses_lease_is_waited_for_until_its_duration_after_we_observed_it() -> None:
    observation = Observation(held_by("other"), 100.0)
    waiting = next_step("me", observation, 114.0, WALL, T)
    assert waiting.action is Action.WAIT
    assert waiting.expires_in == pytest.approx(1.0)
    taking = next_step("me", observation, 115.0, WALL, T)
    assert taking.action is Action.ACQUIRE
    assert taking.record == LeaseRecord("me", 15, STAMP, STAMP, 3)


def test_the_holders_own_duration_counts_not_ours() -> None:
    """A holder configured with a longer lease is waited for that long (client-go reads it from the record)."""
    observation = Observation(held_by("other", duration=60), 0.0)
    assert next_step("me", observation, 59.0, WALL, T).action is Action.WAIT
    assert next_step("me", observation, 60.0, WALL, T).action is Action.ACQUIRE


def test_a_released_lease_is_taken_at_once() -> None:
    free = released(held_by("other"), "other", WALL)
    assert free is not None and free.holder == "" and free.lease_duration_seconds == 1
    step = next_step("me", Observation(free, 100.0), 100.0, WALL, T)
    assert step.action is Action.ACQUIRE and step.record is not None and step.record.holder == "me"


def test_only_the_holder_releases() -> None:
    assert released(held_by("other"), "me", WALL) is None


def test_observation_clock_restarts_only_when_the_lease_changes() -> None:
    """The holder's renewals change renewTime: each resets the standby's clock; a silent holder does not."""
    first = observe(None, held_by("other"), 10.0)
    assert observe(first, held_by("other"), 20.0).since == 10.0
    renewed = LeaseRecord("other", 15, held_by("other").acquire_time, "2026-11-24T23:00:01.000000Z", 2)
    assert observe(first, renewed, 20.0).since == 20.0


def test_wall_clock_of_the_record_is_never_used_for_expiry() -> None:
    """A renewTime far in the past (another node's clock) does not make a freshly observed Lease expired."""
    ancient = LeaseRecord("other", 15, "1970-01-01T00:00:00.000000Z", "1970-01-01T00:00:00.000000Z", 0)
    assert next_step("me", observe(None, ancient, 50.0), 50.0, WALL, T).action is Action.WAIT


def test_leader_stops_at_the_renew_deadline() -> None:
    assert not must_stop(100.0, 109.9, T)
    assert must_stop(100.0, 110.0, T)


def test_a_leader_does_not_wait_for_a_renewal_it_could_not_try_before_its_deadline() -> None:
    assert may_try_again(100.0, 107.9, T)  # the next try, at 109.9, is before the deadline (110)
    assert not may_try_again(100.0, 108.0, T)


# (11, 10, 8): the chart accepted it once; a leader then acted until 18 s, a standby took over at 11 s.
@pytest.mark.parametrize(("duration", "deadline", "retry", "named"), [
    (15, 15, 2, "lease duration"), (15, 10, 9, "renew deadline"), (15, 10, 0, "retry period"),
    (10, 12, 2, "lease duration"), (12, 10, 2, "lease duration"),
    (11, 10, 8, r"lease duration \(11s\) must exceed the renew deadline plus the retry period \(10s \+ 8s\)")])
def test_inconsistent_timings_are_refused(duration: float, deadline: float, retry: float, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        LeaseTimings(duration, deadline, retry)


def test_spec_round_trip() -> None:
    spec = {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": STAMP, "renewTime": STAMP,
            "leaseTransitions": 4}
    assert LeaseRecord.from_spec(spec).to_spec() == spec
    assert LeaseRecord.from_spec({}) == LeaseRecord("", 0, None, None, 0)


@given(since=st.floats(0, 1e6), elapsed=st.floats(0, 1e3), duration=st.integers(1, 600))
def test_a_leader_always_stops_before_a_standby_may_take_over(since: float, elapsed: float, duration: int) -> None:
    """Safety: whenever a standby may take over a Lease (its duration after it observed the last renewal),
    the leader, which renewed no later than that observation, has already passed its renew deadline."""
    timings = LeaseTimings(duration + 1.0, duration * 0.66 + 0.5, duration * 0.2 + 0.1)
    record = LeaseRecord("leader", duration + 1, None, STAMP, 0)
    step = next_step("standby", Observation(record, since), since + elapsed, WALL, timings)
    if step.action is Action.ACQUIRE:
        # The leader's last renewal was sent at or before `since` (the standby saw it then).
        assert must_stop(since, since + elapsed, timings)
