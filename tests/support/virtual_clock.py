"""An asyncio event loop on a virtual clock, for tests of code that waits (asyncio.sleep, wait_for, call_later).

The loop's `time()` is a number the loop itself advances: when every task waits for a timer, instead of
blocking in select() until the earliest one is due, it moves the clock to that moment at once. Minutes of
timeouts and retry periods run in milliseconds, and each run is exactly repeatable. Only for code that
waits on timers and on other tasks: real I/O (sockets, threads) is never waited for, and a loop with nothing
scheduled raises instead of hanging.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _AdvancingSelector(selectors.SelectSelector):
    def __init__(self, loop: VirtualClockLoop):
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise RuntimeError("virtual clock: no task can go on and no timer is set; the loop would wait for ever")
        if timeout > 0:
            self._loop.now += timeout
        return super().select(0)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_AdvancingSelector(self))

    def time(self) -> float:
        return self.now


def run_on_virtual_clock(main: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(main)
