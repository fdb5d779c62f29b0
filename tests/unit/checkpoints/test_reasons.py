"""Why a checkpoint is not published yet: one reason code per case layouts.py decides, with a message that
names the directory and the detail; and the newest one, stuck, reported as CheckpointStalled."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from multinode.checkpoints import Completion, NotReady
from multinode.checkpoints.reasons import ranks_text
from tests.unit.checkpoints import checkpoint_factory as make
from tests.unit.checkpoints.checkpoint_factory import HOUR_AGO, Clock, published_names, write


def rewritten_shard(src: Path) -> None:
    ckpt = make.sharded(src, "checkpoint_0000100")
    write(ckpt / "rank_00002.pt", b"a save rewrites this shard")   # now: newer than the hour-old COMPLETE


def symlink_loop(src: Path) -> None:
    ckpt = make.sharded(src, "checkpoint_0000100")
    os.symlink("loop", ckpt / "loop")   # stat() fails with ELOOP: an error other than "vanished"


def symlink_out(src: Path) -> None:
    ckpt = make.sharded(src, "checkpoint_0000100")
    os.symlink("/etc/hostname", ckpt / "hostname")   # out of the checkpoint: refused (test_untrusted_cache.py)


@dataclass(frozen=True)
class Case:
    reason: NotReady
    setup: Callable[[Path], object]
    name: str                      # the directory reported
    detail: str                    # what the message must say besides the directory
    mirror: dict = field(default_factory=dict)


CASES = [
    Case(NotReady.TEMPORARY_NAME, lambda s: write(s / "checkpoint_0000100.tmp" / "rank_0.pt"),
         "checkpoint_0000100.tmp", "*.tmp"),
    Case(NotReady.SAVE_IN_PROGRESS, lambda s: make.dcp(s, "step-100", metadata="tmp"), "step-100", ".metadata.tmp"),
    Case(NotReady.SAVE_IN_PROGRESS, lambda s: make.nemo(s, 100, unfinished="sibling"),
         "megatron_gpt--val_loss=1.50-step=100-consumed_samples=800.0", "-unfinished exists beside it"),
    Case(NotReady.WAITING_FOR_MARKER, lambda s: make.sharded(s, "checkpoint_0000100", marker=False),
         "checkpoint_0000100", "no COMPLETE marker", {"completion": Completion.MARKER}),
    Case(NotReady.WAITING_FOR_RANK_FILES, lambda s: make.dcp(s, "step-100", shards=4, missing=1), "step-100",
         "__3_0.distcp"),
    Case(NotReady.WAITING_FOR_RANK_FILES, lambda s: make.rank_local_dcp(s, "step-100", [0, 1, 4]), "step-100",
         "waiting for 3 of 6 ranks (rank 2-3, 5)", {"world_size": 6}),
    Case(NotReady.BEING_REWRITTEN, rewritten_shard, "checkpoint_0000100", "rank_00002.pt is newer than COMPLETE"),
    Case(NotReady.RANK_LOCAL_METADATA_WITHOUT_WORLD_SIZE, lambda s: make.rank_local_dcp(s, "step-100", [0]),
         "step-100", "without the job's world size"),
    Case(NotReady.NOT_SETTLED, lambda s: make.hf(s, 100), "checkpoint-100", "waiting until its files are unchanged"),
    Case(NotReady.WAITING_FOR_TRACKER, lambda s: make.megatron(s, [100], tracker=None), "iter_0000100",
         "latest_checkpointed_iteration.txt not written yet"),
    Case(NotReady.WAITING_FOR_TRACKER, lambda s: make.deepspeed(s, [100, 200], latest=100), "global_step200",
         "`latest` names global_step100"),
    Case(NotReady.TRACKER_UNREADABLE, lambda s: make.megatron(s, [100], tracker="garbage"), "iter_0000100",
         "'garbage'"),
    Case(NotReady.LAYOUT_MISMATCH, lambda s: make.sharded(s, "checkpoint_0000100"), "checkpoint_0000100",
         "not an Orbax <step> directory", {"completion": Completion.ORBAX}),
    Case(NotReady.NO_COMPLETION_EVIDENCE, lambda s: write(s / "checkpoint_0000100" / "weights.pt"),
         "checkpoint_0000100", "no completion evidence"),
    Case(NotReady.CANNOT_INSPECT, symlink_loop, "checkpoint_0000100", "cannot inspect"),
    Case(NotReady.REFUSED, symlink_out, "checkpoint_0000100", "hostname is a symlink to /etc/hostname, outside"),
    Case(NotReady.EMPTY, lambda s: (s / "model--step=100-last" / "weights").mkdir(parents=True),
         "model--step=100-last", "no file in it"),
]


def test_every_reason_code_has_a_case() -> None:
    assert {c.reason for c in CASES} == set(NotReady)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.reason}-{c.name[:20]}")
def test_a_checkpoint_not_complete_is_reported_with_its_reason_and_directory(src: Path, dst: Path, make_mirror,
                                                                            case: Case) -> None:
    case.setup(src)
    report = make_mirror(settle_seconds=60, **case.mirror).sync_once()

    assert report.mirrored == [] and published_names(dst) == set()
    mine = [c for c in report.incomplete if c.name == case.name]
    assert [c.reason for c in mine] == [case.reason], report.incomplete
    assert mine[0].message.startswith(f"{src / case.name}: ") and case.detail in mine[0].message, mine[0].message
    assert report.not_ready[case.name] == mine[0].message   # the plain-text view says the same


def test_incomplete_checkpoints_are_listed_oldest_first_since_they_were_first_seen(src: Path, make_mirror,
                                                                                   clock: Clock) -> None:
    mirror = make_mirror()
    make.sharded(src, "checkpoint_0000300", marker=False)
    make.sharded(src, "checkpoint_0000100")
    first_seen = clock()
    assert [c.name for c in mirror.sync_once().incomplete] == ["checkpoint_0000300"]

    clock.advance(30)
    make.sharded(src, "checkpoint_0000200", marker=False)
    report = mirror.sync_once()

    assert [(c.name, c.step, c.since) for c in report.incomplete] == [
        ("checkpoint_0000200", 200, clock()), ("checkpoint_0000300", 300, first_seen)]
    write(src / "checkpoint_0000300" / "COMPLETE", b"")   # complete: no longer listed, published
    report = mirror.sync_once()
    assert [c.name for c in report.incomplete] == ["checkpoint_0000200"]
    assert "checkpoint_0000300" in {c.name for c in report.mirrored}


def stalled(report) -> list[str]:
    return [p.message for p in report.problems if p.reason == "CheckpointStalled"]


def test_the_newest_checkpoint_incomplete_and_unchanged_for_long_is_reported_stalled(src: Path, make_mirror,
                                                                                     clock: Clock) -> None:
    mirror = make_mirror(stalled_seconds=600, world_size=4)
    make.sharded(src, "checkpoint_0000100")
    make.rank_local_dcp(src, "step-200", [0, 1, 2])
    assert stalled(mirror.sync_once()) == []

    clock.advance(599)
    assert stalled(mirror.sync_once()) == []
    clock.advance(1)
    report = mirror.sync_once()

    [message] = stalled(report)
    assert str(src / "step-200") in message and "WaitingForRankFiles" in message and "rank 3" in message
    assert report.problems[-1].checkpoint == "step-200"
    make.rank_local_dcp(src, "step-200", [3])   # the last rank saves after all
    report = mirror.sync_once()
    assert stalled(report) == [] and [c.name for c in report.mirrored] == ["step-200"]


def test_a_save_that_keeps_writing_is_never_stalled_however_long_it_takes(src: Path, make_mirror,
                                                                          clock: Clock) -> None:
    mirror = make_mirror(stalled_seconds=600)
    for rank in range(4):
        write(src / "checkpoint_0000100" / f"rank_{rank:05d}.pt", make.random_bytes(1024, rank))
        assert stalled(mirror.sync_once()) == []
        clock.advance(400)
    clock.advance(400)
    assert len(stalled(mirror.sync_once())) == 1   # no file written for 800s now


def test_only_the_newest_checkpoint_can_be_stalled(src: Path, make_mirror, clock: Clock) -> None:
    mirror = make_mirror(stalled_seconds=60)
    make.sharded(src, "checkpoint_0000100", marker=False)   # a save that crashed long ago
    make.sharded(src, "checkpoint_0000200")
    mirror.sync_once()
    clock.advance(HOUR_AGO)

    report = mirror.sync_once()
    assert stalled(report) == [] and [c.name for c in report.incomplete] == ["checkpoint_0000100"]


def test_missing_ranks_are_named_as_ranges() -> None:
    assert ranks_text([7, 1, 2, 3, 5]) == "1-3, 5, 7"
    assert ranks_text(list(range(0, 40, 2)), limit=3) == "0, 2, 4, and 17 more"
