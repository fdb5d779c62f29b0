"""Retention: the newest `keep`, never the newest one, never a pinned one."""

from __future__ import annotations

from pathlib import Path

from multinode.checkpoints import list_mirrored
from tests.unit.checkpoints import checkpoint_factory as make
from tests.unit.checkpoints.checkpoint_factory import published_names


def name(step: int) -> str:
    return f"checkpoint_{step:07d}"


def test_keep_two_of_five_keeps_the_newest_two(src: Path, dst: Path, make_mirror) -> None:
    mirror = make_mirror(keep=2)
    pruned = []
    for step in (100, 200, 300, 400, 500):
        make.sharded(src, name(step), shards=2, shard_size=1024, seed=step)
        report = mirror.sync_once()
        assert [c.name for c in report.mirrored] == [name(step)]
        pruned += report.pruned

    assert published_names(dst) == {name(400), name(500)}
    assert pruned == [name(100), name(200), name(300)]
    assert report.latest.name == name(500)
    assert not any(p.name.startswith(".trash-") for p in dst.iterdir())


def test_a_pinned_old_checkpoint_survives(src: Path, dst: Path, make_mirror) -> None:
    pinned = {"/checkpoints/job/" + name(100)}   # a path, as MULTINODE_RESUME_FROM says it; a name works too
    mirror = make_mirror(keep=2, pinned=lambda: pinned)
    for step in (100, 200, 300, 400, 500):
        make.sharded(src, name(step), shards=1, shard_size=1024, seed=step)
        mirror.sync_once()

    assert published_names(dst) == {name(100), name(400), name(500)}
    pinned.clear()
    assert mirror.sync_once().pruned == [name(100)]


def test_the_newest_is_never_pruned_even_with_keep_zero(src: Path, dst: Path, make_mirror) -> None:
    mirror = make_mirror(keep=0)
    for step in (100, 200):
        make.sharded(src, name(step), shards=1, shard_size=1024, seed=step)
        mirror.sync_once()

    assert [c.name for c in list_mirrored(dst)] == [name(200)]


def test_a_first_sync_of_a_full_cache_copies_only_what_it_keeps(src: Path, dst: Path, make_mirror) -> None:
    for step in (100, 200, 300, 400, 500):
        make.sharded(src, name(step), shards=1, shard_size=1024, seed=step)

    report = make_mirror(keep=2).sync_once()

    assert [c.name for c in report.mirrored] == [name(400), name(500)]   # oldest first
    assert report.pruned == []


def test_pinned_that_cannot_be_read_prunes_nothing(src: Path, dst: Path, make_mirror) -> None:
    def broken() -> set[str]:
        raise RuntimeError("status unavailable")

    mirror = make_mirror(keep=1, pinned=broken)
    for step in (100, 200):
        make.sharded(src, name(step), shards=1, shard_size=1024, seed=step)
        report = mirror.sync_once()

    assert published_names(dst) == {name(100), name(200)}
    assert [p.reason for p in report.problems] == ["PinnedUnknown"]


def test_a_rewritten_newest_does_not_make_each_pass_publish_and_prune_an_old_one(
        src: Path, dst: Path, make_mirror) -> None:
    # The newest (300) is being rewritten in place: incomplete in the cache, still published. Choosing
    # what to publish from the cache and what to prune from the published disagreed: every pass copied
    # 100 and pruned it again.
    mirror = make_mirror(keep=2)
    for step in (100, 200, 300):
        make.sharded(src, name(step), shards=1, shard_size=1024, seed=step)
        mirror.sync_once()
    assert published_names(dst) == {name(200), name(300)}
    (src / name(300) / "COMPLETE").unlink()

    for _ in range(3):
        report = mirror.sync_once()
        assert (report.mirrored, report.pruned) == ([], [])
    assert published_names(dst) == {name(200), name(300)}

