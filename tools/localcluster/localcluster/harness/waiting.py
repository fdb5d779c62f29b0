"""Wait on a condition with a deadline; never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(probe: Callable[[], T], *, timeout: float, what: str, interval: float = 0.2) -> T:
    """Call `probe` until it returns something truthy; fail with `what` and the last value on timeout."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last observed: {last!r}")
        time.sleep(interval)
