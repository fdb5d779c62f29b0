"""A writer that saves, rewrites, appends, renames, deletes and crashes at random points, against a Mirror
running passes meanwhile: after every pass, everything published verifies and is one complete state the
writer produced (multinode/testing/mirror_chaos.py). A few seeds here; tools/bench/mirror_chaos.py runs hundreds."""

from __future__ import annotations

from pathlib import Path

import pytest

from multinode.testing.mirror_chaos import run_once

SEEDS = [0, 1, 2, 3, 5, 8]


@pytest.mark.parametrize("seed", SEEDS)
def test_everything_published_is_a_complete_state_the_writer_produced(tmp_path: Path, seed: int) -> None:
    # Without the two windows no mirror can see into (O_TRUNC, rmtree): what is left must never fail.
    result = run_once(seed, tmp_path, open_windows=False)

    assert result.violations == []
    assert result.passes >= 2 and result.checked > 0, result   # passes ran, and found something to check
    assert result.counts["crashes"] > 0 and result.counts["save"] > 0, result.counts
