"""Manifests written before the hash was named (format 1: sha256) still verify and still dedupe."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from multinode.checkpoints import MANIFEST_NAME, CorruptCheckpoint, list_mirrored, verify_mirrored
from multinode.checkpoints.hashing import probe
from tests.unit.checkpoints import checkpoint_factory as make

SHARD = 1 << 20


def as_format_1(published: Path) -> None:
    """Rewrite a published manifest the way the mirror wrote it before format 2: sha256 digests under
    "sha256", sha256 probes, no "hash" and no source identity."""
    manifest = published / MANIFEST_NAME
    doc = json.loads(manifest.read_text())
    del doc["hash"]
    doc["format"] = 1
    doc["files"] = [{"path": f["path"], "size": f["size"],
                     "sha256": hashlib.sha256((published / f["path"]).read_bytes()).hexdigest(),
                     "mtime_ns": f["mtime_ns"], "probe": probe(published / f["path"], f["size"], "sha256")}
                    for f in doc["files"]]
    os.chmod(manifest, 0o644)
    manifest.write_text(json.dumps(doc, indent=1))
    os.chmod(manifest, 0o444)


@pytest.fixture
def old(src: Path, dst: Path, make_mirror) -> Path:
    make.sharded(src, "checkpoint_0000100", shard_size=SHARD, seed=1)
    assert make_mirror().sync_once().problems == []
    as_format_1(dst / "checkpoint_0000100")
    return dst / "checkpoint_0000100"


def test_a_format_1_manifest_verifies_and_a_flipped_byte_is_named(old: Path, dst: Path) -> None:
    verify_mirrored(old, full=True)
    assert [c.name for c in list_mirrored(dst)] == ["checkpoint_0000100"]
    victim = old / "rank_00002.pt"
    data = bytearray(victim.read_bytes())
    data[7] ^= 0x80
    os.chmod(victim, 0o644)
    victim.write_bytes(bytes(data))

    with pytest.raises(CorruptCheckpoint) as caught:
        verify_mirrored(old, full=True)

    assert caught.value.path == victim and "sha256" in str(caught.value)


@pytest.mark.parametrize("how", ["renamed", "copied"])
def test_a_new_checkpoint_dedupes_against_a_format_1_one(old: Path, src: Path, make_mirror, how: str) -> None:
    if how == "renamed":
        os.rename(src / "checkpoint_0000100", src / "checkpoint_0000200")
    else:   # new inodes and mtimes: found through the sha256 probe, then the sha256 of the whole file
        shutil.copytree(src / "checkpoint_0000100", src / "checkpoint_0000200", copy_function=shutil.copyfile)
        os.utime(src / "checkpoint_0000200" / "COMPLETE")

    report = make_mirror().sync_once()

    [published] = report.mirrored
    assert report.problems == [] and report.bytes_copied < 0.01 * published.total_bytes
    doc = json.loads((published.path / MANIFEST_NAME).read_text())
    assert doc["format"] == 2 and doc["hash"] == "xxh3_128"
    verify_mirrored(published.path, full=True)
    verify_mirrored(old, full=True)
