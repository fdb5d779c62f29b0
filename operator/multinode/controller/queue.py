"""A deduplicating work queue of job keys, with client-go's workqueue semantics.

Pod and job watch events only mark a job dirty; workers reconcile it. A key is never processed by two
workers at once, and a key marked dirty while it is processed runs once more afterwards, so a burst of
1000 pod events costs a handful of reconciles, not 1000 (this is what keeps API writes per pod low).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)  # the key: a job's (namespace, name) in the operator


class WorkQueue(Generic[K]):
    def __init__(self) -> None:
        self._ready: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()  # in _ready, not yet handed to a worker
        self._processing: set[K] = set()
        self._dirty_while_processing: set[K] = set()
        self._timers: dict[K, asyncio.TimerHandle] = {}
        # Keys resting after a reconcile (see done): events for them wait for the timer.
        self._cooling: set[K] = set()

    def add(self, key: K, delay: float = 0.0) -> None:
        """Ask for `key` to be reconciled, now or after `delay` seconds (the earliest request wins)."""
        if delay > 0:
            loop = asyncio.get_running_loop()
            existing = self._timers.get(key)
            if existing is not None and existing.when() <= loop.time() + delay:
                return
            if existing is not None:
                existing.cancel()
            self._timers[key] = loop.call_later(delay, self._fire_timer, key)
            return
        if key in self._cooling:
            return  # its timer adds it when the rest is over
        if key in self._processing:
            self._dirty_while_processing.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.put_nowait(key)

    def _fire_timer(self, key: K) -> None:
        self._timers.pop(key, None)
        self._cooling.discard(key)
        self.add(key)

    async def get(self) -> K:
        key = await self._ready.get()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K, rest: float = 0.0) -> None:
        """`key` was processed. If it was marked dirty meanwhile it runs again, after `rest` seconds during
        which further events for it are folded into that one run (a big job's reconcile is O(pods), and
        its pods' events would otherwise keep a worker reconciling it back to back)."""
        self._processing.discard(key)
        if key in self._dirty_while_processing:
            self._dirty_while_processing.discard(key)
            if rest > 0:
                existing = self._timers.pop(key, None)
                if existing is not None:
                    existing.cancel()
                self._cooling.add(key)
                self._timers[key] = asyncio.get_running_loop().call_later(rest, self._fire_timer, key)
            else:
                self.add(key)

    def forget(self, key: K) -> None:
        """Drop a pending delayed retry (the object is gone)."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._cooling.discard(key)

    def ready(self, key: K) -> bool:
        """Queued to run now, not only after a timer."""
        return key in self._queued

    def __contains__(self, key: object) -> bool:
        """Queued, being processed, or due again after a timer."""
        return key in self._queued or key in self._processing or key in self._timers

    def __len__(self) -> int:
        return len(self._queued) + len(self._timers)

    def shutdown(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._cooling.clear()
