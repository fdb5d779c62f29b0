"""Walking a checkpoint directory: its files, and a snapshot that changes whenever any of them does."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from multinode.checkpoints.names import is_temporary_file


@dataclass(frozen=True)
class SourceFile:
    rel: str        # relative path, "/"-separated
    path: Path
    size: int
    mtime_ns: int
    ino: int
    ctime_ns: int = 0


def _raise(error: OSError) -> None:
    raise error


def walk_files(root: Path, *, include_temporary: bool = False) -> list[SourceFile]:
    """Every regular file under `root` (symlinks followed, loops cut), sorted by relative path.

    Raises OSError when the tree cannot be read: FileNotFoundError when it, or part of it, vanished.
    """
    files: list[SourceFile] = []
    seen_dirs: set[tuple[int, int]] = set()
    top = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(top, onerror=_raise, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen_dirs:   # a symlink loop: walk each directory once
            dirnames.clear()
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        dirnames.sort()
        base = Path(dirpath)
        # Strings, not Path arithmetic, per file: checkpoints can hold thousands of files.
        prefix = os.path.relpath(dirpath, top).replace(os.sep, "/") + "/" if dirpath != top else ""
        for name in filenames:
            if not include_temporary and is_temporary_file(name):
                continue
            full = os.path.join(dirpath, name)
            try:
                fst = os.stat(full)
            except FileNotFoundError:
                if os.path.islink(full):   # a dangling symlink is not a file of the checkpoint
                    continue
                raise
            files.append(SourceFile(prefix + name, base / name, fst.st_size, fst.st_mtime_ns, fst.st_ino,
                                    fst.st_ctime_ns))
    files.sort(key=lambda f: f.rel)
    return files


@dataclass(frozen=True)
class Snapshot:
    """(relative path, size, mtime_ns) of every file, reduced to a digest, and the newest mtime."""

    digest: str
    files: int
    newest_mtime_ns: int


def take_snapshot(root: Path) -> Snapshot:
    files = walk_files(root, include_temporary=True)
    h = hashlib.blake2b(digest_size=16)
    newest = os.stat(root).st_mtime_ns
    for f in files:
        h.update(f"{f.rel}\0{f.size}\0{f.mtime_ns}\n".encode())
        newest = max(newest, f.mtime_ns)
    return Snapshot(h.hexdigest(), len(files), newest)
