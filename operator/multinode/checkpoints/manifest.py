"""The manifest of a published checkpoint, and reading the published checkpoints back.

A published checkpoint is a non-hidden directory in the destination whose manifest parses and whose files
have the sizes the manifest lists (and no others). The manifest is written last, into the staging
directory, before the rename that publishes it: a directory without a valid one is never a checkpoint.
The manifest is `mirror-manifest.json`, not `manifest.json`, because checkpoints may carry their own
`manifest.json` (the seeds' convention does).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from multinode.checkpoints.hashing import DEFAULT_HASH, DIGEST_LENGTH, HASHES, SHA256, digest_of
from multinode.checkpoints.names import order_key
from multinode.timeformat import TIME_FORMAT

MANIFEST_NAME = "mirror-manifest.json"
# Format 1: every file has a "sha256". Format 2: the manifest names its "hash" and each file has a "digest".
FORMAT_VERSION = 2
READABLE_FORMATS = (1, 2)
_HEX = re.compile(r"^[0-9a-f]+$")
MANIFEST_MAX_BYTES = 1 << 30   # about 3 million files' lines


class CorruptCheckpoint(Exception):
    """A published checkpoint does not match its manifest; `path` is the offending file."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class MirroredCheckpoint:
    """A published checkpoint in the destination, read from its manifest."""

    name: str
    path: Path
    step: int | None
    total_bytes: int
    files: int
    mirrored_at: str            # RFC3339 UTC
    source: str
    completed_at: str | None    # when the engine first saw it complete (for lag)


@dataclass(frozen=True)
class ManifestFile:
    path: str          # relative, "/"-separated
    size: int
    digest: str        # hex, of the whole file, with `algorithm`
    mtime_ns: int | None = None   # of the source file: a dedupe hint
    probe: str | None = None      # digest of sampled blocks, with `algorithm`: a dedupe hint (hashing.probe)
    ino: int | None = None        # of the source file, with ctime_ns: the same file, unchanged (dedupe.py)
    ctime_ns: int | None = None
    algorithm: str = DEFAULT_HASH   # the manifest's hash (sha256 for format 1)


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime(TIME_FORMAT)


def manifest_document(*, name: str, source: str, step: int | None, framework: str | None,
                      files: list[ManifestFile], copied_bytes: int, linked_bytes: int,
                      completed_at: str | None, mirrored_at: str) -> dict[str, Any]:
    if any(f.algorithm != DEFAULT_HASH for f in files):
        raise ValueError(f"a new manifest lists {DEFAULT_HASH} digests only")
    return {
        "format": FORMAT_VERSION, "hash": DEFAULT_HASH, "name": name, "source": source, "step": step,
        "framework": framework, "total_bytes": sum(f.size for f in files), "copied_bytes": copied_bytes,
        "linked_bytes": linked_bytes, "completed_at": completed_at, "mirrored_at": mirrored_at,
        "files": [{k: v for k, v in vars(f).items() if v is not None and k != "algorithm"} for f in files],
    }


def _read_bounded(path: Path) -> bytes:
    """The manifest's bytes: never through a symlink, at most MANIFEST_MAX_BYTES."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:
        size = os.fstat(fd).st_size
        if size > MANIFEST_MAX_BYTES:
            raise ValueError(f"{size} bytes, more than the {MANIFEST_MAX_BYTES} a manifest may have")
        return f.read(MANIFEST_MAX_BYTES + 1)


def read_manifest(path: Path, *, staged: bool = False) -> tuple[MirroredCheckpoint, list[ManifestFile]]:
    """Parse and check the manifest of the checkpoint directory `path` (not its files). `staged`: `path` is a
    staged or set-aside copy (replacing.py), whose name is not the checkpoint's: the manifest's name is."""
    manifest = path / MANIFEST_NAME
    try:
        doc = json.loads(_read_bounded(manifest))
    except FileNotFoundError:
        raise CorruptCheckpoint(manifest, "missing") from None
    except (OSError, ValueError) as e:
        raise CorruptCheckpoint(manifest, f"unreadable: {e}") from None
    try:
        if doc["format"] not in READABLE_FORMATS:
            raise ValueError(f"format {doc['format']!r}, expected one of {READABLE_FORMATS}")
        name = str(doc["name"]) if staged else path.name
        if doc["name"] != name or not name or name.startswith(".") or "/" in name:
            raise ValueError(f"names {doc['name']!r}, not the directory's name")
        algorithm = SHA256 if doc["format"] == 1 else doc["hash"]
        if algorithm not in HASHES:
            raise ValueError(f"hash {algorithm!r}")
        files = [_manifest_file(entry, algorithm, doc["format"]) for entry in doc["files"]]
        total = sum(f.size for f in files)
        if doc["total_bytes"] != total:
            raise ValueError(f"total_bytes {doc['total_bytes']} but the files add up to {total}")
        step = doc["step"]
        if step is not None and (type(step) is not int):
            raise ValueError(f"step {step!r}")
        checkpoint = MirroredCheckpoint(name=name, path=path, step=step, total_bytes=total, files=len(files),
                                        mirrored_at=str(doc["mirrored_at"]), source=str(doc["source"]),
                                        completed_at=doc.get("completed_at"))
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptCheckpoint(manifest, f"invalid: {e!r}") from None
    return checkpoint, files


def _manifest_file(entry: dict[str, Any], algorithm: str, format_version: int) -> ManifestFile:
    rel, size, digest = entry["path"], entry["size"], entry[SHA256 if format_version == 1 else "digest"]
    parts = PurePosixPath(rel).parts if isinstance(rel, str) else ()
    # A manifest names files inside its own directory only.
    if not parts or rel.startswith("/") or any(p in ("..", ".", "") for p in parts) or rel == MANIFEST_NAME:
        raise ValueError(f"file path {rel!r}")
    if type(size) is not int or size < 0 or not isinstance(digest, str) or not _HEX.match(digest) \
            or len(digest) != DIGEST_LENGTH[algorithm]:
        raise ValueError(f"file entry {entry!r}")
    return ManifestFile(rel, size, digest, entry.get("mtime_ns"), entry.get("probe"), entry.get("ino"),
                        entry.get("ctime_ns"), algorithm)


def check_files(path: Path, files: list[ManifestFile], *, full: bool) -> None:
    """Every listed file exists with its size (and, if `full`, its digest), and no other file is there."""
    listed = {f.path for f in files}
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            rel = (Path(dirpath) / name).relative_to(path).as_posix()
            if rel not in listed and rel != MANIFEST_NAME:
                raise CorruptCheckpoint(Path(dirpath) / name, "not in the manifest")
    for f in files:
        file = path / f.path
        try:
            st = os.lstat(file)
        except OSError:
            raise CorruptCheckpoint(file, "missing") from None
        if not os.path.isfile(file) or os.path.islink(file):
            raise CorruptCheckpoint(file, "not a regular file")
        if st.st_size != f.size:
            raise CorruptCheckpoint(file, f"size {st.st_size}, manifest says {f.size}")
        if full:
            digest = digest_of(file, f.algorithm)
            if digest != f.digest:
                raise CorruptCheckpoint(file, f"{f.algorithm} {digest}, manifest says {f.digest}")


def verify_mirrored(path: Path, *, full: bool = True) -> None:
    """Raise CorruptCheckpoint, naming the file, unless `path` matches its manifest.

    `full=False` checks the manifest, the file list and sizes; `full=True` also re-hashes every file.
    """
    path = Path(path)
    _, files = read_manifest(path)
    check_files(path, files, full=full)


def read_published(dest: Path) -> tuple[list[tuple[MirroredCheckpoint, list[ManifestFile]]],
                                        dict[str, CorruptCheckpoint]]:
    """Published checkpoints (oldest first) with their manifests' files, and the directories that look
    published but are not (missing or corrupt manifest, wrong sizes)."""
    good, bad = [], {}
    try:
        entries = sorted(os.scandir(dest), key=lambda e: e.name)
    except FileNotFoundError:
        return [], {}
    for entry in entries:
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue
        path = Path(entry.path)
        try:
            checkpoint, files = read_manifest(path)
            check_files(path, files, full=False)
        except CorruptCheckpoint as e:
            bad[entry.name] = e
            continue
        good.append((checkpoint, files))
    good.sort(key=lambda item: published_order(item[0]))
    return good, bad


def published_order(c: MirroredCheckpoint) -> tuple[tuple[int, float | int], str, str]:
    return (order_key(c.step, 0), c.mirrored_at, c.name)


def list_mirrored(dest: Path) -> list[MirroredCheckpoint]:
    """The published checkpoints in `dest`, newest last: only those whose manifest parses and whose files
    have the listed sizes."""
    return [checkpoint for checkpoint, _ in read_published(Path(dest))[0]]
