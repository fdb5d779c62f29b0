"""The manifest of a published checkpoint: it verifies, and any damage is detected naming the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from multinode.checkpoints import MANIFEST_NAME, CorruptCheckpoint, list_mirrored, verify_mirrored
from tests.unit.checkpoints import checkpoint_factory as make


@pytest.fixture
def published(src: Path, dst: Path, make_mirror) -> Path:
    ckpt = make.sharded(src, "checkpoint_0000100", shards=3)
    make.write(ckpt / "sub" / "dir" / "extra_state.pt", b"nested")
    make.write(ckpt / "COMPLETE", b"")   # the marker last, as writers do
    report = make_mirror().sync_once()
    assert report.problems == []
    return dst / "checkpoint_0000100"


def test_a_published_checkpoint_verifies_and_lists(published: Path, dst: Path) -> None:
    verify_mirrored(published, full=True)

    [mirrored] = list_mirrored(dst)
    assert (mirrored.name, mirrored.step, mirrored.files, mirrored.path) == ("checkpoint_0000100", 100, 6, published)
    assert mirrored.total_bytes == sum(p.stat().st_size for p in published.rglob("*") if p.is_file()) - \
        (published / MANIFEST_NAME).stat().st_size
    assert mirrored.mirrored_at == "2027-01-15T08:00:00Z" == mirrored.completed_at   # T0 of the injected clock
    assert mirrored.source.endswith("cache/job/checkpoint_0000100")
    doc = json.loads((published / MANIFEST_NAME).read_text())
    assert doc["format"] == 2 and doc["hash"] == "xxh3_128" and doc["framework"] == "marker"
    assert doc["copied_bytes"] == mirrored.total_bytes
    assert all(f["mtime_ns"] > 0 and len(f["digest"]) == 32 for f in doc["files"])
    assert (published / "rank_00000.pt").stat().st_mode & 0o777 == 0o444


def test_a_flipped_byte_is_found_by_a_full_verify_naming_the_file(published: Path, dst: Path) -> None:
    victim = published / "rank_00001.pt"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    os.chmod(victim, 0o644)
    victim.write_bytes(bytes(data))

    verify_mirrored(published, full=False)   # same size: only the hash can tell
    with pytest.raises(CorruptCheckpoint) as caught:
        verify_mirrored(published, full=True)

    assert caught.value.path == victim
    assert "rank_00001.pt" in str(caught.value) and "xxh3_128" in str(caught.value)


@pytest.mark.parametrize(("damage", "culprit"), [
    (lambda p: os.truncate(p / "rank_00002.pt", 10), "rank_00002.pt"),
    (lambda p: os.unlink(p / "sub" / "dir" / "extra_state.pt"), "extra_state.pt"),
    (lambda p: (p / "stray.bin").write_bytes(b"?"), "stray.bin"),
    (lambda p: os.unlink(p / MANIFEST_NAME), MANIFEST_NAME),
    (lambda p: (p / MANIFEST_NAME).write_text('{"format": 1, "name": "checkpoint_0000100"'), MANIFEST_NAME),
    (lambda p: (p / MANIFEST_NAME).write_text(json.dumps({
        **json.loads((p / MANIFEST_NAME).read_text()), "files": [
            {"path": "../../escape", "size": 0, "digest": "0" * 32}], "total_bytes": 0})), MANIFEST_NAME),
])
def test_damage_is_named_and_the_checkpoint_is_no_longer_listed(published: Path, dst: Path, damage,
                                                                 culprit: str) -> None:
    for p in published.rglob("*"):
        if p.is_file():
            os.chmod(p, 0o644)   # published files are read-only; the damage comes from elsewhere
    damage(published)

    with pytest.raises(CorruptCheckpoint) as caught:
        verify_mirrored(published, full=False)

    assert caught.value.path.name == culprit
    assert list_mirrored(dst) == []


def test_list_mirrored_orders_by_step_and_skips_hidden_dirs(dst: Path, src: Path, make_mirror) -> None:
    assert list_mirrored(dst) == []
    for step in (300, 100, 200):
        make.sharded(src, f"checkpoint_{step:07d}", shards=1, seed=step)
    make_mirror().sync_once()
    (dst / ".staging-x-1234").mkdir()

    assert [c.step for c in list_mirrored(dst)] == [100, 200, 300]
