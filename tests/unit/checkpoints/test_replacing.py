"""Replacing a published checkpoint where renameat2 cannot exchange (NFS): a crash between the fallback's
steps never loses the published checkpoint, and never leaves a partial one that looks complete.

The fallback is forced (copying.exchange says "cannot"), and the pass is "crashed" at each step: an
exception no code catches, as a SIGKILL stops everything at that point. A reader then looks (every
checkpoint it lists verifies), and the next pass, by a new mirror as after a restart, recovers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from multinode.checkpoints import copying, list_mirrored, replacing, verify_mirrored
from tests.unit.checkpoints import checkpoint_factory as make
from tests.unit.checkpoints.checkpoint_factory import hidden_dirs, published_names, write

CKPT = "checkpoint_0000100"


class Crash(BaseException):
    """Stands for the process dying: nothing catches it, nothing cleans up after it."""


def crash_at(monkeypatch, step: str) -> None:
    """Crash the fallback at `step`: before its first rename, between its renames, or before it removes
    the old version."""
    renames = []
    real_rename, real_remove = replacing._rename, replacing._remove_tree

    def rename(a: Path, b: Path) -> None:
        renames.append((a, b))
        if (step, len(renames)) in (("before the first rename", 1), ("between the renames", 2)):
            raise Crash(step)
        real_rename(a, b)

    def remove_tree(path: Path, ignore_errors: bool = False) -> None:
        if step == "before removing the old version":
            raise Crash(step)
        real_remove(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(replacing, "_rename", rename)
    monkeypatch.setattr(replacing, "_remove_tree", remove_tree)


def no_exchange(monkeypatch) -> None:
    monkeypatch.setattr(copying, "_renameat2", None)   # as on a C library or filesystem without it


def assert_readers_see_only_whole_checkpoints(dst: Path) -> None:
    for checkpoint in list_mirrored(dst):
        verify_mirrored(checkpoint.path, full=True)


def saved_again(ckpt: Path) -> bytes:
    new = make.random_bytes(64 << 10, seed=99)
    write(ckpt / "rank_00002.pt", new)
    os.utime(ckpt / "COMPLETE")   # the marker last, as a save writes it
    return new


@pytest.mark.parametrize("step", ["before the first rename", "between the renames", "before removing the old version"])
def test_a_crash_at_each_step_of_the_fallback_loses_nothing(src: Path, dst: Path, make_mirror, monkeypatch,
                                                            step: str) -> None:
    ckpt = make.sharded(src, CKPT)
    assert [c.name for c in make_mirror().sync_once().mirrored] == [CKPT]
    old = (dst / CKPT / "rank_00002.pt").read_bytes()
    new = saved_again(ckpt)
    no_exchange(monkeypatch)
    crash_at(monkeypatch, step)

    with pytest.raises(Crash):
        make_mirror().sync_once()

    # Right after the crash: whatever a reader lists is whole (between the renames: nothing of that name).
    assert_readers_see_only_whole_checkpoints(dst)
    if step != "between the renames":
        assert (dst / CKPT / "rank_00002.pt").read_bytes() in (old, new)
    monkeypatch.undo()
    no_exchange(monkeypatch)

    report = make_mirror().sync_once()   # a new mirror: the pod restarted

    assert report.problems == [], report.problems
    assert published_names(dst) == {CKPT} and hidden_dirs(dst) == []
    verify_mirrored(dst / CKPT, full=True)
    assert (dst / CKPT / "rank_00002.pt").read_bytes() == new
    assert make_mirror().sync_once().mirrored == []   # the new version is in place: nothing more to do


def test_recovery_puts_back_the_old_version_when_the_new_one_was_not_whole(src: Path, dst: Path, make_mirror,
                                                                           monkeypatch) -> None:
    ckpt = make.sharded(src, CKPT)
    make_mirror().sync_once()
    old = (dst / CKPT / "rank_00002.pt").read_bytes()
    saved_again(ckpt)
    no_exchange(monkeypatch)
    crash_at(monkeypatch, "between the renames")
    with pytest.raises(Crash):
        make_mirror().sync_once()
    monkeypatch.undo()
    [staged] = [dst / d for d in hidden_dirs(dst) if d.startswith(replacing.STAGING_PREFIX)]
    # The staged copy no longer matches its manifest. (Its unchanged shards are hard links to the old
    # version's files, which are never written: the one copied anew goes.)
    (staged / "rank_00002.pt").unlink()
    (src / CKPT / "COMPLETE").unlink()                 # and the cache has no complete copy to publish again

    report = make_mirror().sync_once()

    assert [c.name for c in list_mirrored(dst)] == [CKPT] and hidden_dirs(dst) == []
    verify_mirrored(dst / CKPT, full=True)
    assert (dst / CKPT / "rank_00002.pt").read_bytes() == old
    assert [p.reason for p in report.problems] == []


def test_the_fallback_without_a_crash_replaces_in_three_steps(src: Path, dst: Path, make_mirror,
                                                              monkeypatch) -> None:
    ckpt = make.sharded(src, CKPT)
    mirror = make_mirror()
    mirror.sync_once()
    new = saved_again(ckpt)
    no_exchange(monkeypatch)
    steps: list[tuple[str, str]] = []
    real_rename = replacing._rename
    monkeypatch.setattr(replacing, "_rename", lambda a, b: steps.append((Path(a).name, Path(b).name))
                        or real_rename(a, b))

    report = mirror.sync_once()

    assert [c.name for c in report.mirrored] == [CKPT] and report.problems == []
    (published, aside), (staged, replaced) = steps
    assert (published, replaced) == (CKPT, CKPT)
    assert aside.startswith(replacing.ASIDE_PREFIX) and staged.startswith(replacing.STAGING_PREFIX)
    assert (dst / CKPT / "rank_00002.pt").read_bytes() == new and hidden_dirs(dst) == []
