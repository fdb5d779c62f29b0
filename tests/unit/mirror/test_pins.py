"""Pins fail closed: a mirror that cannot tell which checkpoints are in use prunes and replaces none. The
checkpoints in use are the one the running attempt resumed from and those other jobs' running attempts
resumed from (status.resumedBy, written by the operator)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from multinode.api.checkpointing import MAX_RESUMED_BY
from multinode.checkpoints import Completion, list_mirrored
from multinode.metrics.mirror_metrics import MirrorMetrics
from multinode.mirror.loop import MirrorLoop, PinsUnknown, pinned_names
from tests.unit.checkpoints import checkpoint_factory as make

DEST = Path("/checkpoints/llama")


class FakeReporter:
    """The job's status as the mirror reads it; `failing` stands for an apiserver that does not answer."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.status, self.failing, self.reported = status, False, []

    def read_status(self) -> dict[str, Any]:
        if self.failing:
            raise TimeoutError("read timed out")
        return self.status

    def report(self, checkpoints: dict[str, Any]) -> None:
        self.reported.append(checkpoints)


def test_the_checkpoints_other_jobs_resumed_from_are_pinned_with_our_own() -> None:
    status = {"resumedFrom": f"{DEST}/checkpoint-300",
              "resumedBy": [{"path": f"{DEST}/checkpoint-100", "trainingJob": "finetune-a"},
                            {"path": "/checkpoints/other/checkpoint-100", "trainingJob": "finetune-b"}]}

    assert pinned_names(status, DEST) == {"checkpoint-300", "checkpoint-100"}


def test_a_full_resumed_by_list_means_the_pins_are_unknown() -> None:
    full = [{"path": f"{DEST}/checkpoint-{i}", "trainingJob": f"j{i}"} for i in range(MAX_RESUMED_BY)]

    with pytest.raises(PinsUnknown):
        pinned_names({"resumedBy": full}, DEST)
    assert len(pinned_names({"resumedBy": full[:-1]}, DEST)) == MAX_RESUMED_BY - 1


def loop_over(src: Path, dst: Path, reporter: FakeReporter) -> MirrorLoop:
    return MirrorLoop(source=src, dest=dst, reporter=reporter, completion=Completion.AUTO, keep=1, interval=1,
                      settle=0, metrics=MirrorMetrics(), workers=2)


def test_when_the_status_cannot_be_read_nothing_is_pruned_or_replaced(tmp_path: Path) -> None:
    src, dst = tmp_path / "cache" / "llama", tmp_path / "checkpoints" / "llama"
    make.sharded(src, "checkpoint_0000100", seed=1)
    reporter = FakeReporter({"resumedBy": [{"path": f"{dst}/checkpoint_0000100", "trainingJob": "finetune"}]})
    loop = loop_over(src, dst, reporter)
    loop.one_pass()
    make.sharded(src, "checkpoint_0000200", seed=2)
    loop.one_pass()
    assert [c.name for c in list_mirrored(dst)] == ["checkpoint_0000100", "checkpoint_0000200"]   # 100 pinned
    before = (dst / "checkpoint_0000200" / "rank_00000.pt").read_bytes()

    # The apiserver stops answering; meanwhile 300 is saved and 200 is saved again.
    reporter.failing = True
    make.sharded(src, "checkpoint_0000300", seed=3)
    make.write(src / "checkpoint_0000200" / "rank_00000.pt", b"saved again")
    os.utime(src / "checkpoint_0000200" / "COMPLETE")
    loop.one_pass()

    assert [c.name for c in list_mirrored(dst)] == ["checkpoint_0000100", "checkpoint_0000200", "checkpoint_0000300"]
    assert (dst / "checkpoint_0000200" / "rank_00000.pt").read_bytes() == before
    assert loop.metrics.registry.get_sample_value("multinode_mirror_problems_total", {"reason": "PinnedUnknown"}) == 1

    # The status is back: the pins are known again, and retention goes on (100 is still in use).
    reporter.failing = False
    loop.one_pass()
    assert [c.name for c in list_mirrored(dst)] == ["checkpoint_0000100", "checkpoint_0000300"]
