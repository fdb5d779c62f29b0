"""Replacing a published checkpoint with a new version of it, crash-safe with or without renameat2.

Where the filesystem can exchange two directories (copying.exchange), one call swaps them: `dest/<name>`
is always one whole version, and the old one is left at the staging name, which the next pass removes
if a crash comes first. Where it cannot (NFS), three steps do it:

1. rename `dest/<name>` to `dest/.replaced-<name>-<random>` (the old version, whole, set aside);
2. rename the staging directory (the new version, whole: its manifest is written last) to `dest/<name>`;
3. remove the old version.

Between 1 and 2, `dest/<name>` does not exist: a reader finds no checkpoint of that name, never a part
of one. A crash there leaves both versions whole under hidden names. `recover()`, which every pass runs
under the destination's lock before removing leftovers, puts back the newest whole one (its manifest
parses and lists exactly the files there are, with their sizes) under a name nothing is published
under. So no crash loses a published checkpoint, and none leaves a partial one that looks complete.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from multinode.checkpoints import copying
from multinode.checkpoints.copying import fsync_path
from multinode.checkpoints.manifest import CorruptCheckpoint, check_files, read_manifest

STAGING_PREFIX = ".staging-"
ASIDE_PREFIX = ".replaced-"
LEFTOVER_PREFIXES = (STAGING_PREFIX, ASIDE_PREFIX)
# Module-level, so a test can interrupt the steps one by one (tests/unit/checkpoints/test_replacing.py).
_rename = os.rename
_remove_tree = shutil.rmtree


def replace_published(staging: Path, final: Path) -> None:
    """Put the staged version in place of the published `final` (both in the same directory)."""
    dest = final.parent
    if copying.exchange(staging, final):
        fsync_path(dest)
        _remove_tree(staging, ignore_errors=True)   # the old version now sits at the staging name
        return
    aside = dest / f"{ASIDE_PREFIX}{final.name[:200]}-{secrets.token_hex(4)}"
    _rename(final, aside)
    fsync_path(dest)
    _rename(staging, final)
    fsync_path(dest)
    _remove_tree(aside, ignore_errors=True)


def recover(dest: Path) -> list[str]:
    """After a crash between the steps of replace_published: for each checkpoint name with no directory in
    `dest`, rename the newest whole staged or set-aside version of it into place. Returns the names put
    back. Run under the destination's lock, before leftovers are removed."""
    whole: dict[str, tuple[str, Path]] = {}
    for entry in os.scandir(dest):
        if not entry.name.startswith(LEFTOVER_PREFIXES) or entry.is_symlink() or not entry.is_dir():
            continue
        path = Path(entry.path)
        try:
            checkpoint, files = read_manifest(path, staged=True)
            check_files(path, files, full=False)
        except CorruptCheckpoint:
            continue   # a copy that crashed before its manifest: a leftover, nothing more
        newest = whole.get(checkpoint.name)
        if newest is None or checkpoint.mirrored_at > newest[0]:
            whole[checkpoint.name] = (checkpoint.mirrored_at, path)
    restored = []
    for name, (_, path) in sorted(whole.items()):
        if not os.path.lexists(dest / name):
            _rename(path, dest / name)
            restored.append(name)
    if restored:
        fsync_path(dest)
    return restored
