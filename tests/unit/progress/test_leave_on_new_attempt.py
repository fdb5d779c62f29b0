"""multinode.progress.leave_on_new_attempt: with restartStrategy InPlace, a trainer leaves its attempt as soon
as the pod's attempt file names a newer one (the operator declared it), from a thread, whatever its main
thread waits on; outside such a pod it watches nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from multinode.progress import ATTEMPT_FILE_ENV, NEW_ATTEMPT_EXIT_CODE, leave_on_new_attempt


def test_a_newer_attempt_ends_the_process_with_its_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    attempt = tmp_path / "attempt"
    attempt.write_text("2")
    monkeypatch.setenv(ATTEMPT_FILE_ENV, str(attempt))
    monkeypatch.setenv("MULTINODE_ATTEMPT", "2")
    left: list[int] = []
    done = threading.Event()

    def leave(code: int) -> None:
        left.append(code)
        done.set()

    thread = leave_on_new_attempt(poll_seconds=0.01, leave=leave)
    assert thread is not None and thread.daemon
    assert not done.wait(0.1), "the same attempt: stay"
    attempt.write_text("3")
    assert done.wait(5) and left == [NEW_ATTEMPT_EXIT_CODE]


def test_outside_an_in_place_pod_nothing_is_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ATTEMPT_FILE_ENV, raising=False)
    monkeypatch.setenv("MULTINODE_ATTEMPT", "0")
    assert leave_on_new_attempt(leave=lambda code: pytest.fail("left")) is None
