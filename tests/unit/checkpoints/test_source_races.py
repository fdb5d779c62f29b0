"""What the writer does between the scan that judged a checkpoint complete and the copy: each case was a
torn publication the randomized writer (test_mirror_chaos.py) found. The race window is widened by running
the writer's step just before the real publish starts (a timing no real pass produces on demand)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import multinode.checkpoints.mirror_pass as mirror
from multinode.checkpoints import list_mirrored, verify_mirrored
from tests.unit.checkpoints import checkpoint_factory as make
from tests.unit.checkpoints.checkpoint_factory import published_names, write

CKPT = "checkpoint_0000100"


def before_publish(monkeypatch, action: Callable[[], None]) -> None:
    """Run `action` once, after the scan judged the checkpoint complete and before its copy starts."""
    real, done = mirror.publish, []

    def publish(*args, **kwargs):
        if not done:
            done.append(True)
            action()
        return real(*args, **kwargs)
    monkeypatch.setattr(mirror, "publish", publish)


def reasons(report) -> list[str]:
    return [p.reason for p in report.problems]


def test_a_shard_rewritten_in_place_after_the_scan_is_not_published_mixed(src: Path, dst: Path, make_mirror,
                                                                          monkeypatch) -> None:
    ckpt = make.sharded(src, CKPT)
    before_publish(monkeypatch, lambda: write(ckpt / "rank_00001.pt", b"the next save's shard"))
    m = make_mirror()

    report = m.sync_once()
    assert report.mirrored == [] and reasons(report) == ["SourceChanged"], report.problems
    assert "BeingRewritten" in report.problems[0].message and published_names(dst) == set()

    write(ckpt / "COMPLETE", b"")   # the save ends: now complete, with the new shard
    assert [c.name for c in m.sync_once().mirrored] == [CKPT]
    verify_mirrored(dst / CKPT, full=True)


def test_a_nemo_save_that_starts_after_the_scan_is_not_published_torn(src: Path, dst: Path, make_mirror,
                                                                      monkeypatch) -> None:
    ckpt = make.nemo(src, 100)

    def save_again() -> None:   # NeMo drops its -unfinished marker, then rewrites; it crashes halfway
        write(src / f"{ckpt.name}-unfinished", b"")
        write(ckpt / "weights" / "__0_0.distcp", b"half of the next save")
    before_publish(monkeypatch, save_again)

    report = make_mirror().sync_once()
    assert report.mirrored == [] and reasons(report) == ["SourceChanged"], report.problems
    assert "-unfinished" in report.problems[0].message and published_names(dst) == set()


def test_a_checkpoint_being_deleted_after_the_scan_is_not_published(src: Path, dst: Path, make_mirror,
                                                                    monkeypatch) -> None:
    ckpt = make.sharded(src, CKPT)
    before_publish(monkeypatch, lambda: (ckpt / "rank_00003.pt").unlink())   # the trainer's retention, halfway

    report = make_mirror().sync_once()
    assert report.mirrored == [] and reasons(report) == ["SourceChanged"], report.problems
    assert "added or removed" in report.problems[0].message and published_names(dst) == set()


def test_what_is_left_of_a_published_checkpoint_being_deleted_never_replaces_it(src: Path, dst: Path,
                                                                                make_mirror) -> None:
    ckpt = make.sharded(src, CKPT)
    m = make_mirror()
    [published] = m.sync_once().mirrored
    for shard in ("rank_00000.pt", "rank_00001.pt"):
        os.unlink(ckpt / shard)   # COMPLETE is still there: by its marker, still "complete"

    report = m.sync_once()
    assert report.mirrored == [] and report.problems == []
    assert list_mirrored(dst) == [published]
    verify_mirrored(dst / CKPT, full=True)
    shutil.rmtree(ckpt)
    assert m.sync_once().problems == [] and list_mirrored(dst) == [published]


def truncated_midway(shard: Path) -> None:
    """What a stat sees while a save reopens a shard with O_TRUNC on ext4: the size is already 0, the mtime
    not yet updated (seen by tools/bench/mirror_chaos.py); made here by restoring the mtime."""
    before = shard.stat()
    shard.write_bytes(b"")
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_file_caught_midway_through_a_truncate_after_the_scan_is_not_published(src: Path, dst: Path,
                                                                                 make_mirror, monkeypatch) -> None:
    ckpt = make.dcp(src, "step-100", shards=3)
    before_publish(monkeypatch, lambda: truncated_midway(ckpt / "__0_0.distcp"))

    report = make_mirror().sync_once()
    assert report.mirrored == [] and reasons(report) == ["SourceChanged"], report.problems
    assert "__0_0.distcp changed" in report.problems[0].message and published_names(dst) == set()


def test_a_file_caught_midway_through_a_truncate_does_not_get_a_published_checkpoint_replaced(
        src: Path, dst: Path, make_mirror) -> None:
    ckpt = make.sharded(src, CKPT)
    m = make_mirror()
    [published] = m.sync_once().mirrored
    truncated_midway(ckpt / "rank_00001.pt")

    report = m.sync_once()
    assert report.mirrored == [] and list_mirrored(dst) == [published]
    verify_mirrored(dst / CKPT, full=True)
