"""Leader election on a coordination.k8s.io/v1 Lease, client-go's rules as pure functions.

Given the Lease as last read, when this replica first saw that version of it, and the time now, say what
to do: create the Lease, take it over, renew it, or wait. The loop that reads and writes the Lease (and
exits when it cannot renew) is controller/leader.py.

The rules are client-go's (k8s.io/client-go/tools/leaderelection): a Lease held by someone else counts as
expired `leaseDurationSeconds` after this replica *observed* its last change, on this replica's own
monotonic clock, never by comparing the renewTime written by another machine with our wall clock (clocks
of two nodes differ). A released Lease (empty holderIdentity, as a leader leaves it on a graceful stop)
is free at once.

A leader stops acting once it has not renewed for renewDeadline, and does not wait for a renewal that
could not even be tried before then (`may_try_again`): it acts at most renewDeadline after its last
renewal. A standby takes over no earlier than leaseDuration after it saw that renewal, so timings must
keep leaseDuration > renewDeadline + retryPeriod: the old leader is gone a whole retry period before any
standby may act, time for the calls it had in flight when it stopped to land or fail.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

# client-go's JitterFactor: a standby waits retryPeriod × [1, 1.2) between attempts, and renewDeadline
# must leave room for one such wait.
JITTER_FACTOR = 1.2


@dataclass(frozen=True)
class LeaseTimings:
    """client-go's defaults (kube-controller-manager and kube-scheduler use the same)."""

    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0

    def __post_init__(self) -> None:
        # client-go refuses the first two; the third is stricter than client-go's (lease > renew), see above.
        lease, renew, retry = self.lease_duration_seconds, self.renew_deadline_seconds, self.retry_period_seconds
        if retry <= 0:
            raise ValueError(f"leader election: the retry period must be positive, not {retry:g}s")
        if renew <= JITTER_FACTOR * retry:
            raise ValueError(f"leader election: the renew deadline ({renew:g}s) must exceed {JITTER_FACTOR} × the "
                             f"retry period ({retry:g}s)")
        if lease <= renew + retry:
            raise ValueError(f"leader election: the lease duration ({lease:g}s) must exceed the renew deadline plus "
                             f"the retry period ({renew:g}s + {retry:g}s): a leader may act until the renew deadline, "
                             f"a standby takes over a lease duration after the last renewal it saw")


@dataclass(frozen=True)
class LeaseRecord:
    """A Lease's spec: who holds it, since when, last renewed when, for how long."""

    holder: str = ""
    lease_duration_seconds: int = 15
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> LeaseRecord:
        return cls(holder=str(spec.get("holderIdentity") or ""),
                   lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
                   acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
                   transitions=int(spec.get("leaseTransitions") or 0))

    def to_spec(self) -> dict[str, Any]:
        return {"holderIdentity": self.holder, "leaseDurationSeconds": self.lease_duration_seconds,
                "acquireTime": self.acquire_time, "renewTime": self.renew_time,
                "leaseTransitions": self.transitions}


@dataclass(frozen=True)
class Observation:
    """The Lease as this replica last read it (None: there is none), and when (monotonic seconds) it
    first read that version: a holder's renewal changes renewTime, so the clock restarts with every renewal."""

    record: LeaseRecord | None
    since: float


def observe(previous: Observation | None, record: LeaseRecord | None, now: float) -> Observation:
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


class Action(enum.Enum):
    CREATE = "create"  # no Lease yet: create it, held by us
    ACQUIRE = "acquire"  # free, released or expired: take it over (an update guarded by resourceVersion)
    RENEW = "renew"  # ours: write a new renewTime
    WAIT = "wait"  # someone else holds it and it has not expired


@dataclass(frozen=True)
class Step:
    action: Action
    record: LeaseRecord | None = None  # what to write, unless WAIT
    # WAIT only: seconds until the holder's Lease expires, as far as this replica can tell.
    expires_in: float | None = None


def _micro_time(now: datetime) -> str:
    """A Lease's times are MicroTime: RFC 3339 with microseconds."""
    return now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def next_step(identity: str, observation: Observation, now: float, wall: datetime,
              timings: LeaseTimings) -> Step:
    """What this replica (`identity`) does with the Lease it observed, at monotonic time `now` and wall
    time `wall` (written into the Lease for people to read; no decision is made on it)."""
    duration = max(1, round(timings.lease_duration_seconds))
    stamp = _micro_time(wall)
    current = observation.record
    if current is None:
        return Step(Action.CREATE, LeaseRecord(identity, duration, stamp, stamp, 0))
    if current.holder == identity:
        return Step(Action.RENEW, replace(current, lease_duration_seconds=duration, renew_time=stamp))
    if current.holder:
        expires_in = observation.since + current.lease_duration_seconds - now
        if expires_in > 0:
            return Step(Action.WAIT, expires_in=expires_in)
    return Step(Action.ACQUIRE, LeaseRecord(identity, duration, stamp, stamp, current.transitions + 1))


def released(record: LeaseRecord, identity: str, wall: datetime) -> LeaseRecord | None:
    """What a leader leaving on purpose writes (client-go's ReleaseOnCancel): no holder, a 1 s duration,
    so a standby takes over at its next attempt instead of after the lease duration. None: not ours."""
    if record.holder != identity:
        return None
    stamp = _micro_time(wall)
    return replace(record, holder="", lease_duration_seconds=1, acquire_time=stamp, renew_time=stamp)


def must_stop(last_renewed: float, now: float, timings: LeaseTimings) -> bool:
    """A leader whose last successful renewal is renewDeadline old stops acting (and exits)."""
    return now - last_renewed >= timings.renew_deadline_seconds


def may_try_again(last_renewed: float, now: float, timings: LeaseTimings) -> bool:
    """Whether a leader that waits a retry period from `now` can still try to renew before its renew
    deadline. If not, it stops now: waiting would only let it act past the deadline."""
    return now + timings.retry_period_seconds < last_renewed + timings.renew_deadline_seconds
