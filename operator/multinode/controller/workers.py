"""Workers: the queue of dirty jobs, the tasks that reconcile them, and the retry of a failed reconcile.

A job's key is never reconciled by two workers at once (queue.py). A reconcile that raises is retried with
exponential backoff (0.5 s doubling, at most max_retry_delay_seconds); its failures in a row are counted per
job and forgotten once one succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from multinode.controller.kube import ApiError
from multinode.controller.ownership import ForeignObject
from multinode.controller.queue import WorkQueue
from multinode.controller.stores import JobKey
from multinode.metrics.operator import OperatorMetrics

log = logging.getLogger("multinode.controller")

# After a reconcile of a job whose pods changed meanwhile, wait REST_FACTOR × its duration (at most
# MAX_REST_SECONDS) before the next: a 1000-pod reconcile takes tens of milliseconds, and back to back they
# took a quarter of the operator's CPU during a start, CPU the apiserver needed (docs/benchmarks.md).
REST_FACTOR = 3.0
MAX_REST_SECONDS = 1.0


def retry_delay(failures: int, max_delay: float) -> float:
    """Seconds before the retry of a job whose last `failures` reconciles in a row failed."""
    return min(max_delay, 0.5 * 2 ** (failures - 1))


class Workers:
    def __init__(self, reconcile: Callable[[JobKey], Awaitable[None]], count: int, max_retry_delay: float,
                 metrics: OperatorMetrics):
        self._reconcile, self._count, self._max_retry_delay = reconcile, count, max_retry_delay
        self.metrics = metrics
        self.queue: WorkQueue[JobKey] = WorkQueue()
        self._failures: dict[JobKey, int] = {}
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        for i in range(self._count):
            self._tasks.append(asyncio.create_task(self._work(), name=f"multinode-worker-{i}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.queue.shutdown()

    def forget(self, key: JobKey) -> None:
        self.queue.forget(key)
        self._failures.pop(key, None)

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            started = time.monotonic()
            try:
                await self._reconcile(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a worker must survive anything and retry
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                delay = retry_delay(failures, self._max_retry_delay)
                summary = e.message if isinstance(e, (ApiError, ForeignObject)) else repr(e)
                log.warning("reconcile of %s/%s failed (%d in a row), retrying in %.1fs: %s",
                            key[0], key[1], failures, delay, summary)
                self.queue.add(key, delay=delay)
            finally:
                took = time.monotonic() - started
                self.metrics.reconcile_duration.observe(took)
                # Rest a multiple of what the reconcile took (≈0 for small jobs, a fraction of a second for
                # a 1000-pod one), capping the CPU one busy job's reconciles can take from everything else.
                self.queue.done(key, rest=min(MAX_REST_SECONDS, REST_FACTOR * took))
