"""Faults become problems with a reason, never exceptions, and never a published half-checkpoint."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import sys
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from multinode.checkpoints import MANIFEST_NAME, Mirror, list_mirrored, verify_mirrored
from multinode.checkpoints import copying
from tests.unit.checkpoints import checkpoint_factory as make
from tests.unit.checkpoints.checkpoint_factory import Clock, hidden_dirs, published_names

CKPT = "checkpoint_0000100"


def on_first_write(monkeypatch, action) -> None:
    """Run `action` once, after the first chunk of any file reached the destination."""
    real, lock, done = copying.write_all, threading.Lock(), []

    def write_all(fd: int, data: memoryview) -> None:
        real(fd, data)
        with lock:
            if not done:
                done.append(True)
                action()
    monkeypatch.setattr(copying, "write_all", write_all)


def reasons(report) -> list[str]:
    return [p.reason for p in report.problems]


def test_a_file_modified_during_copy_is_not_published_until_it_is_stable(src: Path, dst: Path, make_mirror,
                                                                         monkeypatch) -> None:
    ckpt = make.sharded(src, CKPT, shards=4, shard_size=256 << 10)
    monkeypatch.setattr(copying, "BUFFER_SIZE", 64 << 10)   # several chunks per file
    victim = ckpt / "rank_00002.pt"

    def scribble() -> None:
        with open(victim, "r+b") as f:
            f.seek(1000)
            f.write(b"a rank rewrote its shard")

    on_first_write(monkeypatch, scribble)
    mirror = make_mirror()
    report = mirror.sync_once()

    assert reasons(report) == ["SourceChanged"] and report.problems[0].checkpoint == CKPT
    assert "rank_00002.pt" in report.problems[0].message
    assert published_names(dst) == set() and hidden_dirs(dst) == []
    assert report.latest is None

    monkeypatch.undo()
    report = mirror.sync_once()
    assert report.mirrored == [] and report.problems == [], "a shard newer than its marker is being rewritten"
    assert "rank_00002.pt is newer than COMPLETE" in report.not_ready[CKPT]

    make.write(ckpt / "COMPLETE", b"")   # the writer finishes its save: the marker comes last again
    report = mirror.sync_once()
    assert [c.name for c in report.mirrored] == [CKPT] and report.problems == []
    verify_mirrored(dst / CKPT, full=True)
    assert (dst / CKPT / "rank_00002.pt").read_bytes() == victim.read_bytes()


@pytest.mark.parametrize("make_unavailable", [
    lambda src: shutil.rmtree(src),
    lambda src: shutil.rmtree(src) or src.write_text("not a directory"),
])
def test_a_missing_cache_is_a_problem_not_an_exception(src: Path, dst: Path, make_mirror, make_unavailable) -> None:
    make.sharded(src, CKPT, shards=1)
    mirror = make_mirror()
    mirror.sync_once()
    make_unavailable(src)

    report = mirror.sync_once()

    assert reasons(report) == ["CacheUnavailable"]
    assert report.latest.name == CKPT and report.pruned == []   # what is published stays, and is reported


def test_an_unreadable_cache_is_a_problem() -> None:
    # Root reads any directory, so the pass runs as an unprivileged user (uid 65534), as a process,
    # under a base it can reach (pytest's own tmp folders are private to root).
    base = Path(tempfile.mkdtemp(prefix="multinode-unreadable-"))
    base.chmod(0o755)
    src, dst = base / "cache", base / "dest"
    make.sharded(src, CKPT, shards=1)
    dst.mkdir()
    os.chown(dst, 65534, 65534)
    os.chmod(src, 0)
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    try:
        result = subprocess.run([*as_nobody, sys.executable, "-m", "multinode.checkpoints.cli_sync",
                                 str(src), str(dst)],
                                capture_output=True, text=True, timeout=60, check=False)
    finally:
        os.chmod(src, 0o755)
        published = [p.name for p in dst.iterdir() if not p.name.startswith(".")]
        shutil.rmtree(base)
    assert result.returncode == 1, result.stderr
    assert "CacheUnavailable" in result.stdout + result.stderr
    assert published == []


def test_a_checkpoint_vanishing_mid_copy_is_source_vanished(src: Path, dst: Path, make_mirror, monkeypatch) -> None:
    ckpt = make.sharded(src, CKPT, shards=8, shard_size=128 << 10)
    on_first_write(monkeypatch, lambda: shutil.rmtree(ckpt))

    report = make_mirror(workers=2).sync_once()

    assert reasons(report) == ["SourceVanished"]
    assert published_names(dst) == set() and hidden_dirs(dst) == []


def test_a_file_rewritten_before_it_was_read_is_caught_by_the_recheck_after_the_copy(
        src: Path, dst: Path, make_mirror, monkeypatch) -> None:
    # Each file is read whole and unchanged, yet the set mixes two saves: one shard was rewritten (same
    # size) after the scan and before the mirror got to it. Only re-checking the whole set finds it.
    ckpt = make.sharded(src, CKPT, shards=4, shard_size=256 << 10)
    small = ckpt / "manifest.json"

    def rewrite() -> None:
        small.write_bytes(small.read_bytes().upper())
    on_first_write(monkeypatch, rewrite)

    report = make_mirror(workers=1).sync_once()

    assert reasons(report) == ["SourceChanged"] and "manifest.json" in report.problems[0].message
    assert published_names(dst) == set() and hidden_dirs(dst) == []
    monkeypatch.undo()
    later = make_mirror(workers=1).sync_once()
    assert later.mirrored == [] and "newer than COMPLETE" in later.not_ready[CKPT]


def test_a_kept_checkpoint_that_fails_to_publish_leaves_the_older_ones_published(
        src: Path, dst: Path, make_mirror, monkeypatch) -> None:
    mirror = make_mirror(keep=2, workers=2)
    for step in (100, 200):
        make.sharded(src, f"checkpoint_{step:07d}", shards=1, shard_size=1024, seed=step)
        mirror.sync_once()
    newest = make.sharded(src, "checkpoint_0000300", shards=8, shard_size=128 << 10, seed=300)
    on_first_write(monkeypatch, lambda: shutil.rmtree(newest))

    report = mirror.sync_once()

    assert reasons(report) == ["SourceVanished"] and report.pruned == []
    assert published_names(dst) == {"checkpoint_0000100", "checkpoint_0000200"}


def test_a_full_disk_publishes_nothing_and_leaves_no_staging(src: Path, dst: Path, make_mirror,
                                                           monkeypatch, clock: Clock) -> None:
    make.sharded(src, "checkpoint_0000100", shards=4, seed=1)
    make.sharded(src, "checkpoint_0000200", shards=4, seed=2)

    def full(fd: int, data: memoryview) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(copying, "write_all", full)
    mirror = make_mirror()
    report = mirror.sync_once()

    assert reasons(report) == ["DestinationFull"]   # the second checkpoint is not even tried
    assert published_names(dst) == set() and hidden_dirs(dst) == []

    monkeypatch.undo()
    clock.advance(30)
    report = mirror.sync_once()
    assert [c.name for c in report.mirrored] == ["checkpoint_0000100", "checkpoint_0000200"]
    assert report.lag_seconds == [30.0, 30.0]   # complete since the first pass


@pytest.mark.parametrize("crash", ["garbage manifest", "no manifest", "short file"])
def test_a_corrupt_checkpoint_from_a_crash_is_reported_and_mirrored_again(src: Path, dst: Path, make_mirror,
                                                                          crash: str) -> None:
    make.sharded(src, CKPT, shards=3)
    mirror = make_mirror()
    mirror.sync_once()
    os.chmod(dst / CKPT / MANIFEST_NAME, 0o644)
    if crash == "garbage manifest":
        (dst / CKPT / MANIFEST_NAME).write_bytes(b'{"format": 1, "na')
    elif crash == "no manifest":
        os.unlink(dst / CKPT / MANIFEST_NAME)
    else:
        os.chmod(dst / CKPT / "rank_00001.pt", 0o644)
        os.truncate(dst / CKPT / "rank_00001.pt", 100)

    report = mirror.sync_once()

    assert reasons(report) == ["CorruptManifest"] and report.problems[0].checkpoint == CKPT
    assert [c.name for c in report.mirrored] == [CKPT]
    verify_mirrored(dst / CKPT, full=True)
    assert hidden_dirs(dst) == []
    assert mirror.sync_once().problems == []


def test_a_corrupt_checkpoint_no_longer_in_the_cache_is_reported_and_left(src: Path, dst: Path, make_mirror) -> None:
    make.sharded(src, CKPT, shards=1)
    mirror = make_mirror()
    mirror.sync_once()
    os.unlink(dst / CKPT / MANIFEST_NAME)
    shutil.rmtree(src / CKPT)

    report = mirror.sync_once()

    assert reasons(report) == ["CorruptManifest"]
    assert published_names(dst) == {CKPT} and list_mirrored(dst) == [] and report.latest is None


def test_leftovers_of_a_crashed_pass_are_removed(src: Path, dst: Path, make_mirror) -> None:
    make.sharded(src, CKPT, shards=1)
    for leftover in (f".staging-{CKPT}-0badc0de", f".trash-{CKPT}-0badc0de"):
        make.write(dst / leftover / "rank_00000.pt", b"half")

    report = make_mirror().sync_once()

    assert report.problems == [] and [c.name for c in report.mirrored] == [CKPT]
    assert hidden_dirs(dst) == []


def test_a_second_mirror_on_the_same_destination_backs_off(src: Path, dst: Path, make_mirror) -> None:
    make.sharded(src, CKPT, shards=1)
    dst.mkdir(parents=True)
    with open(dst / ".mirror.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        report = make_mirror().sync_once()

    assert reasons(report) == ["DestinationBusy"] and published_names(dst) == set()


def test_an_unwritable_destination_is_a_problem(tmp_path: Path, src: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")

    report = Mirror(src, blocker / "job").sync_once()

    assert reasons(report) == ["DestinationUnavailable"]


@pytest.mark.parametrize(("error", "outcome"), [(errno.EIO, "CopyFailed"), (errno.ENOSPC, "DestinationFull"),
                                                (errno.EINVAL, None)])
def test_writeback_errors_surface_while_copying(src: Path, dst: Path, make_mirror, monkeypatch,
                                                error: int, outcome: str | None) -> None:
    make.sharded(src, CKPT, shards=2, shard_size=256 << 10)
    monkeypatch.setattr(copying, "BUFFER_SIZE", 64 << 10)

    def sync_file_range(fd: int, offset: int, nbytes: int, flags: int) -> int:
        ctypes.set_errno(error)
        return -1

    monkeypatch.setattr(copying, "_sync_file_range", sync_file_range)
    report = make_mirror().sync_once()

    if outcome is None:   # the filesystem cannot: advice only, and the copy goes on
        assert report.problems == [] and copying._sync_file_range is None
        verify_mirrored(dst / CKPT, full=True)
    else:
        assert reasons(report) == [outcome] and hidden_dirs(dst) == [] and published_names(dst) == set()
