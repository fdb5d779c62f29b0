"""The leader election loop over an in-memory Lease store with the apiserver's optimistic concurrency, on a
virtual clock (tests/support/virtual_clock.py; the real Lease API is exercised by
tests/integration/controller/test_leader_election.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from multinode.controller.kube import ApiError
from multinode.controller.leader import LeaderElector
from multinode.controller.settings import LeaderElection
from multinode.reconcile.leadership import LeaseTimings
from tests.support.virtual_clock import run_on_virtual_clock

FAST = LeaseTimings(lease_duration_seconds=0.6, renew_deadline_seconds=0.4, retry_period_seconds=0.1)
# The least margin the chart accepts (whole seconds): renewDeadline just above 1.2 × retryPeriod, and
# leaseDuration just above renewDeadline + retryPeriod.
WORST_ACCEPTED = LeaseTimings(lease_duration_seconds=19, renew_deadline_seconds=10, retry_period_seconds=8)


class Leases:
    """One namespace's Leases: resourceVersion checked on update, 409 on a stale one or a duplicate create."""

    def __init__(self) -> None:
        self.store: dict[str, dict] = {}
        self.version = 0
        self.broken = False  # the apiserver is unreachable

    def _check(self) -> None:
        if self.broken:
            raise ApiError("lease", None, "ConnectTimeoutError", "unreachable")

    async def get_lease(self, namespace: str, name: str) -> dict | None:
        self._check()
        lease = self.store.get(name)
        return None if lease is None else {"metadata": dict(lease["metadata"]), "spec": dict(lease["spec"])}

    async def create_lease(self, namespace: str, name: str, spec: dict) -> None:
        self._check()
        if name in self.store:
            raise ApiError("create_namespaced_lease", 409, "Conflict", "exists")
        self.version += 1
        self.store[name] = {"metadata": {"resourceVersion": str(self.version)}, "spec": dict(spec)}

    async def replace_lease(self, namespace: str, name: str, resource_version: str, spec: dict) -> None:
        self._check()
        if self.store[name]["metadata"]["resourceVersion"] != resource_version:
            raise ApiError("replace_namespaced_lease", 409, "Conflict", "modified")
        self.version += 1
        self.store[name] = {"metadata": {"resourceVersion": str(self.version)}, "spec": dict(spec)}


def elector(leases: Any, identity: str, changes: list[bool] | None = None,
            timings: LeaseTimings = FAST) -> LeaderElector:
    sink = changes if changes is not None else []
    return LeaderElector(leases, LeaderElection("ns", identity, timings=timings), sink.append)


@dataclass
class CutOff:
    """One replica's way to the shared Leases, cut at `at` (loop time): from then on each of its calls fails
    at once ("error") or never answers ("hang"), while the other replicas still get through. Records when
    each of its writes was stored."""

    leases: Leases
    at: float
    mode: str
    writes: list[float] = field(default_factory=list)

    async def _through(self) -> None:
        if asyncio.get_running_loop().time() >= self.at:
            if self.mode == "hang":
                await asyncio.Event().wait()
            raise ApiError("lease", 503, "ServiceUnavailable", "cut off")

    async def get_lease(self, namespace: str, name: str) -> dict | None:
        await self._through()
        return await self.leases.get_lease(namespace, name)

    async def create_lease(self, namespace: str, name: str, spec: dict) -> None:
        await self._through()
        await self.leases.create_lease(namespace, name, spec)
        self.writes.append(asyncio.get_running_loop().time())

    async def replace_lease(self, namespace: str, name: str, resource_version: str, spec: dict) -> None:
        await self._through()
        await self.leases.replace_lease(namespace, name, resource_version, spec)
        self.writes.append(asyncio.get_running_loop().time())


def test_one_of_two_leads_and_the_other_takes_over_when_it_stops_renewing() -> None:
    async def scenario() -> None:
        leases = Leases()
        a_changes: list[bool] = []
        a, b = elector(leases, "a", a_changes), elector(leases, "b")
        await a.acquire()
        assert a.leading and leases.store["multinode-operator"]["spec"]["holderIdentity"] == "a"
        assert not await b.try_acquire_or_renew()
        # a stays leader while it renews; b cannot take over meanwhile.
        holding = asyncio.create_task(a.hold())
        await asyncio.sleep(1.0)
        assert not await b.try_acquire_or_renew()
        # a dies (no more renewals): b waits out the lease duration, then takes over.
        holding.cancel()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(b.acquire(), timeout=5)
        assert loop.time() - started >= FAST.lease_duration_seconds - FAST.retry_period_seconds * 1.2
        spec = leases.store["multinode-operator"]["spec"]
        assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
        assert a_changes == [True]

    run_on_virtual_clock(scenario())


def test_a_leader_that_cannot_renew_gives_up_within_the_renew_deadline() -> None:
    async def scenario() -> None:
        leases = Leases()
        changes: list[bool] = []
        a = elector(leases, "a", changes)
        await a.acquire()
        leases.broken = True
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(a.hold(), timeout=5)
        assert loop.time() - started <= FAST.renew_deadline_seconds
        assert changes == [True, False] and not a.leading

    run_on_virtual_clock(scenario())


@pytest.mark.parametrize("mode", ["error", "hang"])
@pytest.mark.parametrize("cut_at", [0.5, 7.9, 8.0, 8.1, 12.0, 15.9, 16.0, 23.95])
def test_with_the_worst_accepted_timings_the_leader_stops_before_a_standby_takes_over(cut_at: float,
                                                                                       mode: str) -> None:
    """A leader cut off from the apiserver (its calls failing, or never answered) at any point of its renewal
    cycle stops acting within renewDeadline of its last renewal; the standby, which still reaches the
    apiserver, takes over a lease duration after it saw that renewal: a retry period later at the least."""
    async def scenario() -> None:
        leases = Leases()
        leader_side = CutOff(leases, at=cut_at, mode=mode)
        a_changes: list[bool] = []
        a = elector(leader_side, "a", a_changes, WORST_ACCEPTED)
        b = elector(leases, "b", timings=WORST_ACCEPTED)
        loop = asyncio.get_running_loop()
        await a.acquire()
        stopped: list[float] = []
        holding = asyncio.create_task(a.hold())
        holding.add_done_callback(lambda _: stopped.append(loop.time()))
        await b.acquire()
        took_over = loop.time()
        await holding
        assert a_changes == [True, False] and not a.leading
        last_renewal = max(w for w in leader_side.writes if w <= cut_at)
        assert stopped[0] <= last_renewal + WORST_ACCEPTED.renew_deadline_seconds
        assert took_over - stopped[0] >= WORST_ACCEPTED.retry_period_seconds
        assert leases.store["multinode-operator"]["spec"]["holderIdentity"] == "b"

    run_on_virtual_clock(scenario())


def test_a_leader_that_sees_another_holder_gives_up_at_once() -> None:
    async def scenario() -> None:
        leases = Leases()
        a = elector(leases, "a")
        await a.acquire()
        lease = leases.store["multinode-operator"]
        lease["spec"]["holderIdentity"] = "intruder"
        lease["metadata"]["resourceVersion"] = "999"
        await asyncio.wait_for(a.hold(), timeout=FAST.renew_deadline_seconds)
        assert not a.leading

    run_on_virtual_clock(scenario())


def test_release_hands_over_at_the_next_attempt() -> None:
    async def scenario() -> None:
        leases = Leases()
        a, b = elector(leases, "a"), elector(leases, "b")
        await a.acquire()
        assert not await b.try_acquire_or_renew()
        await a.release()
        assert leases.store["multinode-operator"]["spec"]["holderIdentity"] == ""
        assert await b.try_acquire_or_renew()

    run_on_virtual_clock(scenario())


def test_a_lost_race_is_not_an_error() -> None:
    """Two standbys take over the same expired Lease: one update wins, the other gets 409 and waits."""
    async def scenario() -> None:
        leases = Leases()
        a, b = elector(leases, "a"), elector(leases, "b")
        original = leases.get_lease

        async def read_then_lose(namespace: str, name: str) -> Any:
            lease = await original(namespace, name)
            await leases.create_lease(namespace, name, {"holderIdentity": "c", "leaseDurationSeconds": 15})
            return lease

        leases.get_lease = read_then_lose  # type: ignore[method-assign]
        assert not await a.try_acquire_or_renew()
        leases.get_lease = original  # type: ignore[method-assign]
        assert not await b.try_acquire_or_renew()
        assert leases.store["multinode-operator"]["spec"]["holderIdentity"] == "c"

    run_on_virtual_clock(scenario())


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MULTINODE_LEADER_ELECTION", raising=False)
    assert LeaderElection.from_env() is None
    monkeypatch.setenv("MULTINODE_LEADER_ELECTION", "true")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    monkeypatch.setenv("POD_NAME", "multinode-abc")
    monkeypatch.setenv("MULTINODE_LEASE_DURATION_SECONDS", "30")
    election = LeaderElection.from_env(renew_deadline_seconds=20.0)
    assert election is not None
    assert election.namespace == "ops" and election.name == "multinode-operator"
    assert election.identity.startswith("multinode-abc_")
    assert election.timings == LeaseTimings(30.0, 20.0, 2.0)
    assert LeaderElection.from_env(False) is None
    # Two replicas (or a restarted container) never share an identity.
    assert LeaderElection.from_env() != LeaderElection.from_env()
