"""Dedupe: content already published is linked, not copied; changed content is copied in one read."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from multinode.checkpoints import MANIFEST_NAME, list_mirrored, verify_mirrored
from multinode.checkpoints import publish as publish_module
from multinode.checkpoints.dedupe import IDENTITY_MARGIN_NS
from tests.unit.checkpoints import checkpoint_factory as make

SHARD = 1 << 20   # 8 shards of 1 MiB: the metadata files are well under 1% of the total


@pytest.fixture
def first(src: Path, make_mirror):
    make.sharded(src, "checkpoint_0000100", shard_size=SHARD, seed=1)
    mirror = make_mirror()
    report = mirror.sync_once()
    assert report.bytes_copied == report.mirrored[0].total_bytes > 8 * SHARD
    return mirror


def assert_linked(report, total_bytes: int) -> None:
    assert report.problems == []
    assert report.bytes_copied < 0.01 * total_bytes
    assert report.bytes_copied + report.bytes_linked == total_bytes


def test_an_unchanged_checkpoint_under_a_new_name_is_linked(src: Path, dst: Path, first) -> None:
    os.rename(src / "checkpoint_0000100", src / "checkpoint_0000200")   # same files, same mtimes

    report = first.sync_once()

    [published] = report.mirrored
    assert published.name == "checkpoint_0000200"
    assert_linked(report, published.total_bytes)
    verify_mirrored(published.path, full=True)
    verify_mirrored(dst / "checkpoint_0000100", full=True)


def test_a_copy_with_new_mtimes_is_linked_through_the_probe(src: Path, first) -> None:
    shutil.copytree(src / "checkpoint_0000100", src / "checkpoint_0000200", copy_function=shutil.copyfile)
    os.utime(src / "checkpoint_0000200" / "COMPLETE")   # written last, as a writer marks a checkpoint done

    report = first.sync_once()

    assert_linked(report, report.mirrored[0].total_bytes)
    verify_mirrored(report.mirrored[0].path, full=True)


def test_a_removed_destination_entry_is_relinked_from_another(src: Path, dst: Path, first) -> None:
    shutil.copytree(src / "checkpoint_0000100", src / "checkpoint_0000200")
    first.sync_once()
    shutil.rmtree(dst / "checkpoint_0000100")

    report = first.sync_once()

    assert [c.name for c in report.mirrored] == ["checkpoint_0000100"]
    assert_linked(report, report.mirrored[0].total_bytes)
    assert [c.name for c in list_mirrored(dst)] == ["checkpoint_0000100", "checkpoint_0000200"]


def test_changed_shards_of_the_same_size_are_copied_in_one_read(src: Path, first, monkeypatch) -> None:
    make.sharded(src, "checkpoint_0000200", shard_size=SHARD, seed=2)   # every weight changed
    hashed = hashed_files(monkeypatch)

    report = first.sync_once()

    # Only the small files whose sampled blocks match (same content) are hashed before copying.
    assert [h for h in hashed if h.startswith("rank_")] == []
    assert report.bytes_copied >= 8 * SHARD
    verify_mirrored(report.mirrored[0].path, full=True)


def hashed_files(monkeypatch) -> list[str]:
    """The source files the publisher hashes before deciding to link (read only), as they happen."""
    hashed: list[str] = []
    real = publish_module.hash_source
    monkeypatch.setattr(publish_module, "hash_source", lambda f, *args: hashed.append(f.rel) or real(f, *args))
    return hashed


def published_identities(dst: Path, name: str) -> dict[str, bool]:
    """Whether the manifest records each file's identity (inode and ctime: dedupe without reading)."""
    doc = json.loads((dst / name / MANIFEST_NAME).read_text())
    return {f["path"]: "ino" in f and "ctime_ns" in f for f in doc["files"]}


@pytest.fixture
def seen_first(src: Path, make_mirror, clock: make.Clock):
    """A mirror that saw the shards being written a pass before the save completed, as a running mirror
    does: their identities were seen a margin before the publish, so the manifest records them."""
    make.sharded(src, "checkpoint_0000100", shard_size=SHARD, seed=1, marker=False)
    mirror = make_mirror()
    assert mirror.sync_once().mirrored == []
    clock.advance(IDENTITY_MARGIN_NS / 1e9)
    make.write(src / "checkpoint_0000100" / "COMPLETE", b"")
    assert [c.name for c in mirror.sync_once().mirrored] == ["checkpoint_0000100"]
    return mirror


def test_a_renamed_checkpoint_is_linked_without_reading_it(src: Path, dst: Path, seen_first, monkeypatch) -> None:
    assert published_identities(dst, "checkpoint_0000100") == {
        **{f"rank_{r:05d}.pt": True for r in range(8)}, "manifest.json": True, "COMPLETE": False}
    hashed = hashed_files(monkeypatch)
    os.rename(src / "checkpoint_0000100", src / "checkpoint_0000200")   # the same files: same inode and ctime

    report = seen_first.sync_once()

    assert_linked(report, report.mirrored[0].total_bytes)
    assert [h for h in hashed if h.startswith("rank_")] == []
    verify_mirrored(report.mirrored[0].path, full=True)


def test_identities_follow_the_mirrors_own_looks_not_the_files_times(src: Path, dst: Path, make_mirror,
                                                                    clock: make.Clock) -> None:
    """The files' ctimes come from the clock of whoever wrote them. A mirror whose clock is hours ahead of
    the cache's (another machine) must not take a file written just now for one that cannot change unseen:
    only a file it saw itself, unchanged, a margin before the publish, has its identity recorded."""
    make.sharded(src, "checkpoint_0000100", shard_size=SHARD, seed=1)
    clock.t = time.time() + 10 * 3600   # files written "now"; the mirror's clocks far ahead of them

    make_mirror().sync_once()

    assert not any(published_identities(dst, "checkpoint_0000100").values())


def test_a_file_rewritten_in_place_with_its_mtime_restored_is_copied(src: Path, first) -> None:
    shard = src / "checkpoint_0000100" / "rank_00003.pt"
    before = shard.stat()
    shard.write_bytes(make.random_bytes(SHARD, seed=9))   # same size, same inode, other weights
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.rename(src / "checkpoint_0000100", src / "checkpoint_0000200")

    report = first.sync_once()

    # The ctime moved: the identity no longer matches, and the probe rules the file out.
    assert report.bytes_copied >= SHARD
    verify_mirrored(report.mirrored[0].path, full=True)
    published = report.mirrored[0].path / "rank_00003.pt"
    assert published.read_bytes() == make.random_bytes(SHARD, seed=9)


def test_files_changed_within_the_margin_are_hashed_before_linking(src: Path, make_mirror, monkeypatch) -> None:
    make.sharded(src, "checkpoint_0000100", shard_size=SHARD, seed=1)
    now = make.Clock(time.time())   # the files' ctime is now: a coarse timestamp could hide a rewrite
    make_mirror(clock=now).sync_once()
    doc = json.loads((make_mirror().dest / "checkpoint_0000100" / MANIFEST_NAME).read_text())
    assert all("ino" not in f and "ctime_ns" not in f for f in doc["files"])
    hashed = hashed_files(monkeypatch)
    os.rename(src / "checkpoint_0000100", src / "checkpoint_0000200")

    report = make_mirror(clock=now).sync_once()

    assert_linked(report, report.mirrored[0].total_bytes)
    assert {h for h in hashed if h.startswith("rank_")} == {f"rank_{r:05d}.pt" for r in range(8)}
