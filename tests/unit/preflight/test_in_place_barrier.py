"""Preflight's in-place barrier (preflight/in_place_barrier.py): the first start passes; a restart waits for a
newer attempt in the pod's annotation file, and records it; no newer attempt in time fails with a reason."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from multinode.preflight.in_place_barrier import wait_for_new_attempt


def test_the_first_start_passes_and_records_its_attempt(tmp_path: Path) -> None:
    attempt, state = tmp_path / "attempt", tmp_path / "passed"
    attempt.write_text("3")
    assert wait_for_new_attempt(attempt, state, timeout=1) is None
    assert state.read_text() == "3"


def test_a_restart_waits_until_the_operator_writes_a_newer_attempt(tmp_path: Path) -> None:
    attempt, state = tmp_path / "attempt", tmp_path / "passed"
    attempt.write_text("3")
    state.write_text("3")
    declared = threading.Event()

    def declare() -> None:
        time.sleep(0.3)
        attempt.write_text("4")
        declared.set()
    threading.Thread(target=declare).start()
    assert wait_for_new_attempt(attempt, state, timeout=10, poll=0.02) is None
    assert declared.is_set() and state.read_text() == "4"


def test_no_newer_attempt_in_time_fails_with_a_reason(tmp_path: Path) -> None:
    attempt, state = tmp_path / "attempt", tmp_path / "passed"
    attempt.write_text("3")
    state.write_text("3")
    failure = wait_for_new_attempt(attempt, state, timeout=0.2, poll=0.02)
    assert failure is not None and failure.startswith("InPlaceBarrierTimedOut:") and "attempt 3" in failure
    assert state.read_text() == "3"
