"""A hot spare's preflight (`multinode preflight --spare`, preflight/program.py): it checks the node and makes
the job's directories first (warm), then waits past its timeout, for as long as it takes, until the operator
writes an attempt (a rank) into its annotation file; it resolves no peers. Restarted in place later, it is an
in-place pod like any: the barrier's deadline applies again."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from multinode.preflight.program import PreflightRequest, run


def _request(tmp_path: Path, timeout: float = 0.2) -> PreflightRequest:
    return PreflightRequest(timeout=timeout, peers=["never-resolves.invalid"], make_dirs=[str(tmp_path / "cache")],
                            in_place_attempt_file=tmp_path / "attempt", in_place_state_file=tmp_path / "passed",
                            spare=True)


def test_a_spare_is_checked_first_then_waits_past_its_timeout_until_given_a_rank(tmp_path: Path) -> None:
    (tmp_path / "attempt").write_text("")  # the downward API file of an annotation not written yet
    outcome: list[int] = []
    waiting = threading.Thread(target=lambda: outcome.append(run(_request(tmp_path))))
    waiting.start()
    waiting.join(timeout=0.6)  # three times its timeout: still waiting, and the node's directories are made
    assert waiting.is_alive() and outcome == []
    assert (tmp_path / "cache").is_dir(), "warm: checked and ready before it has a rank"
    (tmp_path / "attempt").write_text("5")
    waiting.join(timeout=10)
    assert outcome == [0], "no peers resolved: a spare joins a gang whose names are up"
    assert (tmp_path / "passed").read_text() == "5"


def test_restarted_in_place_after_taking_a_rank_it_waits_only_until_its_timeout(tmp_path: Path) -> None:
    (tmp_path / "attempt").write_text("5")
    (tmp_path / "passed").write_text("5")
    started = time.monotonic()
    assert run(_request(tmp_path, timeout=0.2)) == 1
    assert time.monotonic() - started < 5
