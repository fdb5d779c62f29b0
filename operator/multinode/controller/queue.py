"""A deduplicating work queue of job keys, with client-go's workqueue semantics.

Pod and job watch events only mark a job dirty; workers reconcile it. A key is never processed by two
workers at once, and a key marked dirty while it is processed runs once more afterwards, so a burst of
1000 pod events costs a handful of reconciles, not 1000 (this is what keeps API writes per pod low).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable


class WorkQueue:
    def __init__(self) -> None:
        self._ready: asyncio.Queue[Hashable] = asyncio.Queue()
        self._queued: set[Hashable] = set()  # in _ready, not yet handed to a worker
        self._processing: set[Hashable] = set()
        self._dirty_while_processing: set[Hashable] = set()
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}

    def add(self, key: Hashable, delay: float = 0.0) -> None:
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
        if key in self._processing:
            self._dirty_while_processing.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.put_nowait(key)

    def _fire_timer(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> Hashable:
        key = await self._ready.get()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: Hashable) -> None:
        self._processing.discard(key)
        if key in self._dirty_while_processing:
            self._dirty_while_processing.discard(key)
            self.add(key)

    def forget(self, key: Hashable) -> None:
        """Drop a pending delayed retry (the object is gone)."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def __len__(self) -> int:
        return len(self._queued) + len(self._timers)

    def shutdown(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
