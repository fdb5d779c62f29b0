"""The cache is written by the trainer, so the mirror trusts nothing in it: it never follows a symlink out of
a checkpoint, never reads anything but regular files, and bounds what it reads of the files it parses.

A checkpoint that breaks these rules is refused with a reason (a problem each pass, and `Refused` in
notReady); it is never published, and never replaces or removes one already published.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from multinode.checkpoints import Completion, NotReady, list_mirrored, verify_mirrored
from multinode.checkpoints.layouts import METADATA_MAX_BYTES
from multinode.checkpoints.reasons import Refusal
from tests.unit.checkpoints import checkpoint_factory as make
from tests.unit.checkpoints.checkpoint_factory import published_names, write

CKPT = "checkpoint_0000100"
SECRET = b"the mirror's service account token"
# A pass over these tiny checkpoints takes well under a second; a hang is what this bounds.
PASS_TIMEOUT = 60
# What a pass may write per file in the bounded process: a runaway copy of /dev/zero stops here.
FILE_SIZE_LIMIT = 64 << 20


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Files the mirror can read and the trainer must not get: a stand-in for the mirror's own token."""
    secrets = tmp_path / "secrets"
    write(secrets / "token", SECRET)
    write(secrets / "nested" / "ca.crt", SECRET)
    return secrets


def refusals(report) -> list[tuple[str, str | None]]:
    return [(p.reason, p.checkpoint) for p in report.problems if p.reason in set(Refusal)]


def assert_refused(report, reason: Refusal, detail: str) -> None:
    assert refusals(report) == [(reason, CKPT)], report.problems
    problem = next(p for p in report.problems if p.reason == reason)
    assert detail in problem.message, problem.message
    [incomplete] = [c for c in report.incomplete if c.name == CKPT]
    assert incomplete.reason == NotReady.REFUSED and detail in incomplete.message, incomplete


def run_bounded_pass(src: Path, dst: Path, *args: str) -> dict:
    """One pass of cli_sync in its own process, with a time limit and a limit on the size of each file it
    writes (RLIMIT_FSIZE): a mirror that hangs or copies without end fails the test instead of the machine."""
    code = ("import resource, runpy, sys; "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({FILE_SIZE_LIMIT}, {FILE_SIZE_LIMIT})); "
            "sys.argv = sys.argv[1:]; runpy.run_module('multinode.checkpoints.cli_sync', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code, "cli_sync", str(src), str(dst), *args],
                          capture_output=True, text=True, timeout=PASS_TIMEOUT, check=False)
    assert done.returncode in (0, 1), done.stderr   # 1: the pass reported a problem
    summary = done.stdout.splitlines()[-1]
    return json.loads(summary)


def test_a_symlink_to_a_file_outside_the_checkpoint_refuses_it(src: Path, dst: Path, make_mirror,
                                                               outside: Path) -> None:
    ckpt = make.sharded(src, CKPT)
    os.symlink(outside / "token", ckpt / "rank_00001.pt.extra")
    os.symlink("/etc/hostname", ckpt / "hostname")

    report = make_mirror().sync_once()

    assert_refused(report, Refusal.UNSAFE_SYMLINK, "outside the checkpoint")
    assert report.mirrored == [] and published_names(dst) == set()


def test_a_symlink_to_a_directory_outside_refuses_it_and_nothing_of_it_is_read(src: Path, dst: Path, make_mirror,
                                                                               outside: Path) -> None:
    ckpt = make.sharded(src, CKPT)
    os.symlink(outside, ckpt / "optimizer")
    os.symlink("/etc/security", ckpt / "security")

    report = make_mirror().sync_once()

    assert_refused(report, Refusal.UNSAFE_SYMLINK, "optimizer")
    assert published_names(dst) == set()


def test_a_relative_symlink_climbing_out_of_the_checkpoint_refuses_it(src: Path, make_mirror, outside: Path) -> None:
    ckpt = make.sharded(src, CKPT)
    write(src / "shared.pt", SECRET)   # in the cache, but not in this checkpoint
    os.symlink("../shared.pt", ckpt / "shared.pt")

    assert_refused(make_mirror().sync_once(), Refusal.UNSAFE_SYMLINK, "shared.pt")


def test_a_symlink_to_a_file_inside_the_checkpoint_is_published_as_that_file(src: Path, dst: Path,
                                                                             make_mirror) -> None:
    ckpt = make.sharded(src, CKPT)
    os.symlink("rank_00000.pt", ckpt / "model.pt")                    # relative
    (ckpt / "best").mkdir()
    os.symlink(ckpt / "rank_00003.pt", ckpt / "best" / "weights.pt")   # absolute, still inside

    report = make_mirror().sync_once()

    assert [c.name for c in report.mirrored] == [CKPT] and refusals(report) == []
    published = dst / CKPT
    assert not (published / "model.pt").is_symlink()
    assert (published / "model.pt").read_bytes() == (ckpt / "rank_00000.pt").read_bytes()
    assert (published / "best" / "weights.pt").read_bytes() == (ckpt / "rank_00003.pt").read_bytes()
    verify_mirrored(published, full=True)


def test_a_symlink_to_a_directory_inside_the_checkpoint_refuses_it(src: Path, make_mirror) -> None:
    ckpt = make.sharded(src, CKPT)
    (ckpt / "shards").mkdir()
    write(ckpt / "shards" / "a.pt", b"a")
    os.symlink("shards", ckpt / "alias")   # the tree twice, or a loop: not copied as a tree
    os.utime(ckpt / "COMPLETE")

    assert_refused(make_mirror().sync_once(), Refusal.UNSAFE_SYMLINK, "directory")


def test_a_fifo_in_a_checkpoint_neither_hangs_the_mirror_nor_is_published(src: Path, dst: Path) -> None:
    ckpt = make.sharded(src, CKPT)
    os.mkfifo(ckpt / "rank_00009.pt")
    os.utime(ckpt / "COMPLETE")

    summary = run_bounded_pass(src, dst)

    assert summary["mirrored"] == [] and published_names(dst) == set()
    assert [(p["reason"], p["checkpoint"]) for p in summary["problems"]] == [(Refusal.SPECIAL_FILE, CKPT)]
    assert "rank_00009.pt" in summary["problems"][0]["message"]


def test_a_socket_in_a_checkpoint_refuses_it(src: Path, make_mirror) -> None:
    ckpt = make.sharded(src, CKPT)
    # AF_UNIX paths are limited to ~108 bytes: bind from inside the directory.
    here = os.getcwd()
    os.chdir(ckpt)
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind("rank.sock")
    finally:
        os.chdir(here)
    os.utime(ckpt / "COMPLETE")

    assert_refused(make_mirror().sync_once(), Refusal.SPECIAL_FILE, "rank.sock")


def test_a_symlink_to_dev_zero_neither_fills_the_destination_nor_is_published(src: Path, dst: Path) -> None:
    ckpt = make.sharded(src, CKPT)
    os.symlink("/dev/zero", ckpt / "rank_00009.pt")

    summary = run_bounded_pass(src, dst)

    assert summary["mirrored"] == [] and summary["bytes_copied"] == 0
    assert [p["reason"] for p in summary["problems"]] == [Refusal.UNSAFE_SYMLINK]
    assert published_names(dst) == set()


def test_a_fifo_as_a_tracker_file_does_not_hang_the_scan(src: Path, dst: Path) -> None:
    make.megatron(src, [100], tracker=None)
    os.mkfifo(src / "latest_checkpointed_iteration.txt")

    summary = run_bounded_pass(src, dst, "--completion", "megatron")

    assert summary["mirrored"] == []


def test_a_tracker_symlinked_out_of_the_cache_is_not_read(src: Path, make_mirror, outside: Path) -> None:
    make.megatron(src, [100], tracker=None)
    os.symlink(outside / "token", src / "latest_checkpointed_iteration.txt")

    report = make_mirror(completion=Completion.MEGATRON).sync_once()

    assert report.mirrored == []
    assert SECRET.decode()[:20] not in " ".join(c.message for c in report.incomplete)


def test_dcp_metadata_beyond_the_bound_refuses_the_checkpoint(src: Path, make_mirror, monkeypatch) -> None:
    ckpt = make.dcp(src, "step-100")
    with open(ckpt / ".metadata", "ab") as f:
        f.truncate(METADATA_MAX_BYTES + 1)   # sparse: no disk used
    os.utime(ckpt / ".metadata")

    report = make_mirror().sync_once()

    assert [(p.reason, p.checkpoint) for p in report.problems] == [(Refusal.METADATA_TOO_LARGE, "step-100")]
    assert [c.reason for c in report.incomplete] == [NotReady.REFUSED]


def test_a_refused_checkpoint_never_replaces_or_removes_the_published_one(src: Path, dst: Path, make_mirror,
                                                                          outside: Path) -> None:
    ckpt = make.sharded(src, CKPT)
    mirror = make_mirror(keep=1)
    assert [c.name for c in mirror.sync_once().mirrored] == [CKPT]
    before = {p.name: p.read_bytes() for p in (dst / CKPT).iterdir()}

    # The trainer saves again into the same directory, now with a link out of it.
    write(ckpt / "rank_00000.pt", b"a new save")
    os.symlink(outside / "token", ckpt / "extra.pt")
    os.utime(ckpt / "COMPLETE")
    report = mirror.sync_once()

    assert refusals(report) == [(Refusal.UNSAFE_SYMLINK, CKPT)] and report.mirrored == [] and report.pruned == []
    assert {p.name: p.read_bytes() for p in (dst / CKPT).iterdir()} == before
    assert [c.name for c in list_mirrored(dst)] == [CKPT]
    verify_mirrored(dst / CKPT, full=True)


def test_a_cache_directory_that_is_a_symlink_is_not_read(tmp_path: Path, dst: Path, outside: Path) -> None:
    from multinode.checkpoints import Mirror

    make.sharded(outside, CKPT)
    linked = tmp_path / "cache" / "linked-job"
    linked.parent.mkdir(exist_ok=True)
    os.symlink(outside, linked)

    report = Mirror(linked, dst).sync_once()

    assert [p.reason for p in report.problems] == ["CacheUnavailable"] and "symlink" in report.problems[0].message
    assert published_names(dst) == set()


MIRROR_UID = 65532   # the mirror pod's pinned non-root uid, with the same gid as its fsGroup


def test_a_non_root_mirror_publishes_what_a_root_trainer_wrote_with_ordinary_modes() -> None:
    """The trainer often runs as root (NGC images), the mirror as a pinned non-root uid: it needs nothing of
    the cache but what ordinary modes give everyone (files 0644, directories 0755), and of the checkpoint
    volume what the pod's fsGroup gives (group-owned, group-writable, setgid)."""
    assert os.geteuid() == 0, "the test plays the root trainer and drops to the mirror's uid (setpriv)"
    base = Path(tempfile.mkdtemp(prefix="multinode-nonroot-"))   # pytest's tmp folders are private to root
    base.chmod(0o755)
    old_umask = os.umask(0o022)
    try:
        src, volume = base / "cache" / "job", base / "checkpoints"
        ckpt = make.sharded(src, CKPT)
        write(ckpt / "optimizer" / "rank_0.pt", b"state")
        os.symlink("rank_00000.pt", ckpt / "model.pt")
        os.utime(ckpt / "COMPLETE")
        volume.mkdir()
        os.chown(volume, 0, MIRROR_UID)
        volume.chmod(0o2775)
        as_mirror = ["setpriv", f"--reuid={MIRROR_UID}", f"--regid={MIRROR_UID}", "--clear-groups"]
        done = subprocess.run([*as_mirror, sys.executable, "-m", "multinode.checkpoints.cli_sync", str(src),
                               str(volume / "job")], capture_output=True, text=True, timeout=PASS_TIMEOUT,
                              check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout.splitlines()[-1])["mirrored"] == [CKPT]
        verify_mirrored(volume / "job" / CKPT, full=True)
        assert (volume / "job" / CKPT / "model.pt").read_bytes() == (ckpt / "rank_00000.pt").read_bytes()
        assert (volume / "job" / CKPT).stat().st_uid == MIRROR_UID
    finally:
        os.umask(old_umask)
        shutil.rmtree(base)
