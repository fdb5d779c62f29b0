"""Preflight's barrier for pods restarted in place (failurePolicy.restartStrategy InPlace, render/in_place.py).

A pod's containers restart in place as soon as its trainer exits; the operator declares the new attempt a
moment later, by rewriting the pod's annotations. The trainer reads the attempt's values (attempt, resume
path) from those annotations when it starts, so it must not start before they change: preflight, which runs
again first, waits until the attempt in the pod's downward API file is newer than the one it let through
last (kept in an emptyDir, which outlives the containers). The first start passes at once.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger("multinode.preflight")

POLL_SECONDS = 0.1


def _read_attempt(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _record(state_file: Path, attempt: int) -> None:
    # Whole or not at all: a container killed mid-write must not leave a number the next start misreads.
    tmp = state_file.with_name(state_file.name + ".tmp")
    tmp.write_text(str(attempt))
    os.replace(tmp, state_file)


def wait_for_new_attempt(attempt_file: Path, state_file: Path, timeout: float,
                         poll: float = POLL_SECONDS) -> str | None:
    """None once the pod's attempt may start (recorded as passed); a failure message at `timeout`."""
    passed = _read_attempt(state_file)
    deadline = time.monotonic() + timeout
    if passed is not None:
        log.info("restarted in place after attempt %d: waiting up to %.0fs for the operator's next attempt",
                 passed, timeout)
    while True:
        current = _read_attempt(attempt_file)
        if current is not None and (passed is None or current > passed):
            _record(state_file, current)
            if passed is not None:
                log.info("attempt %d declared: starting it in place", current)
            return None
        if time.monotonic() >= deadline:
            return (f"InPlaceBarrierTimedOut: restarted in place after attempt {passed}, and the operator declared "
                    f"no newer attempt within {timeout:.0f}s")
        time.sleep(poll)
