"""The leader election loop: read and write the Lease as reconcile/leadership.py decides.

`acquire()` returns once this replica holds the Lease (a standby polls every retryPeriod, jittered);
`hold()` renews it every retryPeriod and returns at the latest renewDeadline after its last renewal (sooner
when the next try could not come before then), or when it saw another holder: the caller must then stop
acting at once (cli/operator.py exits the process, as client-go's
users do with klog.Fatal, and Kubernetes restarts the container as a standby). `release()` hands the
Lease back on a graceful stop, so a standby takes over at its next attempt instead of after the lease
duration.

While it waits, a standby answers the liveness and readiness probes itself (StandbyHealth): waiting for
the Lease is its job, not a failure; kopf's own endpoint on the same port replaces it once it leads.

Times are read from the event loop's clock (monotonic, as time.monotonic), so that a test can run the loop
on a virtual clock.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from datetime import datetime, timezone
from urllib.parse import urlsplit

from multinode.controller.kube import ApiError, KubeApi
from multinode.controller.settings import LeaderElection
from multinode.reconcile.leadership import (
    JITTER_FACTOR,
    Action,
    LeaseRecord,
    Observation,
    may_try_again,
    must_stop,
    next_step,
    observe,
    released,
)

log = logging.getLogger("multinode.leader")

# A graceful stop waits this long per call to hand the Lease back, then lets it expire instead.
RELEASE_TIMEOUT_SECONDS = 5.0


class LeaderElector:
    def __init__(self, kube: KubeApi, election: LeaderElection,
                 on_change: Callable[[bool], None] = lambda leading: None):
        self.kube = kube
        self.election = election
        self._on_change = on_change
        self._observation: Observation | None = None
        self._renewed_at = float("-inf")  # monotonic: when the last successful write was sent
        self.leading = False
        self._holder_said: str | None = None

    @property
    def holder(self) -> str:
        """The holder of the Lease as last read ("" when none or released)."""
        record = self._observation.record if self._observation is not None else None
        return record.holder if record is not None else ""

    def _set_leading(self, leading: bool) -> None:
        if leading != self.leading:
            self.leading = leading
            self._on_change(leading)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's tryAcquireOrRenew): True if this replica holds the Lease after it."""
        e = self.election
        clock = asyncio.get_running_loop().time
        started = clock()
        lease = await self.kube.get_lease(e.namespace, e.name)
        record = None if lease is None else LeaseRecord.from_spec(lease.get("spec") or {})
        now = clock()
        self._observation = observe(self._observation, record, now)
        step = next_step(e.identity, self._observation, now, datetime.now(timezone.utc), e.timings)
        if step.action is Action.WAIT:
            return False
        assert step.record is not None, "every step but WAIT writes a record"
        try:
            if step.action is Action.CREATE or lease is None:
                await self.kube.create_lease(e.namespace, e.name, step.record.to_spec())
            else:
                await self.kube.replace_lease(e.namespace, e.name, lease["metadata"]["resourceVersion"],
                                              step.record.to_spec())
        except ApiError as error:
            if error.status == 409:  # another replica wrote it since our read: it goes first
                return False
            raise
        self._observation = Observation(step.record, clock())
        # Counted from before the read: the apiserver stored the renewal no earlier than that, so a standby
        # that observes it starts its lease-duration clock later still.
        self._renewed_at = started
        if step.action is not Action.RENEW:
            log.info("leader election: %s now holds Lease %s/%s (transition %d)", e.identity, e.namespace,
                     e.name, step.record.transitions)
        return True

    def _jittered(self) -> float:
        period = self.election.timings.retry_period_seconds
        return period * random.uniform(1.0, JITTER_FACTOR)  # jitter, not a secret

    async def acquire(self) -> None:
        """Wait until this replica holds the Lease."""
        e = self.election
        log.info("leader election: %s waiting for Lease %s/%s", e.identity, e.namespace, e.name)
        while True:
            try:
                if await self.try_acquire_or_renew():
                    self._set_leading(True)
                    return
            except ApiError as error:
                log.warning("leader election: cannot read or write Lease %s/%s: %s", e.namespace, e.name, error)
            if self.holder != self._holder_said:
                self._holder_said = self.holder
                log.info("leader election: standby; Lease %s/%s held by %s", e.namespace, e.name,
                         self.holder or "nobody")
            await asyncio.sleep(self._jittered())

    async def hold(self) -> None:
        """Renew every retryPeriod; return when leadership is lost: renewDeadline passed since the last
        renewal, or will have before the next try could be made, or another holder was seen. The caller
        stops acting at once."""
        e = self.election
        timings = e.timings
        clock = asyncio.get_running_loop().time
        while True:
            # Checked before sleeping: a leader that slept through its deadline would act past it, towards
            # the moment a standby may take over.
            if not may_try_again(self._renewed_at, clock(), timings):
                break
            await asyncio.sleep(timings.retry_period_seconds)
            remaining = self._renewed_at + timings.renew_deadline_seconds - clock()
            if remaining <= 0:
                break
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation that comes as
                # the renewal completes, and a cancelled hold() would go on renewing.
                async with asyncio.timeout(remaining):
                    renewed = await self.try_acquire_or_renew()
                if renewed:
                    continue
            except (ApiError, TimeoutError) as error:
                log.warning("leader election: renewing Lease %s/%s failed: %s", e.namespace, e.name,
                            error or "timed out")
                continue
            if self.holder and self.holder != e.identity:
                break  # taken over: someone else acts now
            if must_stop(self._renewed_at, clock(), timings):
                break
        self._set_leading(False)
        log.error("leader election: %s lost Lease %s/%s (holder now: %s)", e.identity, e.namespace, e.name,
                  self.holder or "unknown")

    async def release(self) -> None:
        """Hand the Lease back (a graceful stop); best effort: if this fails it simply expires."""
        e = self.election
        self._set_leading(False)
        timeout = RELEASE_TIMEOUT_SECONDS
        try:
            lease = await asyncio.wait_for(self.kube.get_lease(e.namespace, e.name), timeout)
            if lease is None:
                return
            record = released(LeaseRecord.from_spec(lease.get("spec") or {}), e.identity, datetime.now(timezone.utc))
            if record is None:
                return
            await asyncio.wait_for(self.kube.replace_lease(e.namespace, e.name, lease["metadata"]["resourceVersion"],
                                                           record.to_spec()), timeout)
            log.info("leader election: %s released Lease %s/%s", e.identity, e.namespace, e.name)
        except (ApiError, TimeoutError) as error:
            log.warning("leader election: could not release Lease %s/%s (it expires instead): %s",
                        e.namespace, e.name, error or "timed out")


class StandbyHealth:
    """Answers 200 on the liveness endpoint's address while this replica waits for the Lease."""

    def __init__(self, endpoint: str):
        parts = urlsplit(endpoint)
        self.host = parts.hostname or "0.0.0.0"
        self.port = parts.port or 80
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._answer, self.host, self.port)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            body = b'{"standby": true}\n'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
