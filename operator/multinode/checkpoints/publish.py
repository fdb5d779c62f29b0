"""Publishing one checkpoint: stage, copy or link every file in parallel, verify, write the manifest
last, rename into place.

Crash-safe because the destination only ever gains a non-hidden directory by one rename of a staging
directory whose files and manifest are already written and fsynced. A crash leaves a `.staging-*`
directory, which the next pass puts in place (replacing.recover) if it is whole and its name is free, and
otherwise removes. A fault abandons the whole checkpoint (staging removed) and is raised as PublishFailed
with the reason the caller reports.
"""

from __future__ import annotations

import json
import os
import posixpath
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multinode.checkpoints.copying import (
    READ_ONLY,
    Cancelled,
    DestinationError,
    SourceChanged,
    SourceError,
    copy_and_hash,
    fsync_path,
    hash_source,
    is_out_of_space,
    link_published,
    probe_source,
)
from multinode.checkpoints.dedupe import DedupeIndex
from multinode.checkpoints.hashing import DEFAULT_HASH
from multinode.checkpoints.manifest import (
    MANIFEST_NAME,
    ManifestFile,
    MirroredCheckpoint,
    manifest_document,
    rfc3339,
)
from multinode.checkpoints.reasons import RefusedEntry
from multinode.checkpoints.replacing import STAGING_PREFIX, replace_published
from multinode.checkpoints.scan import CheckpointCandidate
from multinode.checkpoints.tree import SourceFile, tree_stamps, walk_files


class PublishFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass
class PublishResult:
    checkpoint: MirroredCheckpoint
    files: list[ManifestFile]
    copied_bytes: int
    linked_bytes: int
    seconds: float
    mirrored_time: float   # the clock's reading when it was published


def publish(candidate: CheckpointCandidate, dest: Path, *, index: DedupeIndex, workers: int,
            completed_at: str | None, clock: Callable[[], float], replace: bool = False,
            recheck: Callable[[], str | None] | None = None,
            identity_settled: Callable[[SourceFile], bool] = lambda f: False,
            progress: Callable[[], None] = lambda: None) -> PublishResult:
    """Stage `candidate` and rename it into place. `replace`: a published version of it exists and is
    exchanged for the new one (a reader sees the old or the new, never a mix; replacing.py). `recheck`
    says why the source is not complete any more (None: it still is); it is asked after the copy, before
    the source is checked for changes (scan.rejudge). `identity_settled` says of a file whether its
    identity may go into the manifest (dedupe.Sightings). `progress` is called after each file staged."""
    staging = dest / f"{STAGING_PREFIX}{candidate.name[:200]}-{secrets.token_hex(4)}"
    try:
        return _Publisher(candidate, dest, staging, index, workers, replace, recheck,
                          identity_settled, progress).run(completed_at, clock)
    except PublishFailed:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except RefusedEntry as e:   # the checkpoint now holds what the mirror never reads
        shutil.rmtree(staging, ignore_errors=True)
        raise PublishFailed(e.reason, f"{candidate.name} refused: {e.message}") from None
    except (SourceError, DestinationError, SourceChanged) as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise _classify(e, candidate, dest) from None


def _classify(e: SourceError | DestinationError | SourceChanged, candidate: CheckpointCandidate,
              dest: Path) -> PublishFailed:
    if isinstance(e, SourceChanged):
        return PublishFailed("SourceChanged", f"{e}; not published, tried again next pass")
    error = e.error
    where = error.filename or candidate.path
    if isinstance(e, SourceError):
        if isinstance(error, (FileNotFoundError, NotADirectoryError)):
            return PublishFailed("SourceVanished", f"{where} vanished while {candidate.name} was copied")
        return PublishFailed("CopyFailed", f"cannot read {where}: {error.strerror or error}")
    if is_out_of_space(error):
        return PublishFailed("DestinationFull", f"no space left in {dest} while copying {candidate.name} "
                                                f"({error.strerror}); nothing published")
    return PublishFailed("CopyFailed", f"cannot write {where}: {error.strerror or error}")


class _Publisher:
    def __init__(self, candidate: CheckpointCandidate, dest: Path, staging: Path, index: DedupeIndex,
                 workers: int, replace: bool, recheck: Callable[[], str | None] | None,
                 identity_settled: Callable[[SourceFile], bool], progress: Callable[[], None]) -> None:
        self.candidate, self.dest, self.staging, self.index = candidate, dest, staging, index
        self.replace, self.recheck, self.identity_settled = replace, recheck, identity_settled
        self.progress = progress
        self.workers = max(1, workers)
        self.cancel = threading.Event()

    def run(self, completed_at: str | None, clock: Callable[[], float]) -> PublishResult:
        started = time.monotonic()
        try:
            files = [f for f in walk_files(self.candidate.path) if f.rel != MANIFEST_NAME]
        except OSError as e:
            raise SourceError(e) from None
        dirs = self._make_dirs(files)
        entries, copied, linked = self._stage_all(files)
        why_not = self.recheck() if self.recheck else None
        if why_not:
            raise SourceChanged(f"{self.candidate.path} is not complete any more ({why_not}) after it was copied")
        self._ensure_source_unchanged(files)
        self._check_sizes(entries)
        mirrored_time = clock()
        doc = manifest_document(name=self.candidate.name, source=str(self.candidate.path), step=self.candidate.step,
                                framework=self.candidate.framework, files=entries, copied_bytes=copied,
                                linked_bytes=linked, completed_at=completed_at, mirrored_at=rfc3339(mirrored_time))
        final = self.dest / self.candidate.name
        try:
            for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
                fsync_path(d)
            self._write_manifest(doc)
            fsync_path(self.staging)
            if self.replace:
                replace_published(self.staging, final)
            elif os.path.lexists(final):
                raise PublishFailed("CopyFailed", f"{final} appeared while {self.candidate.name} was staged")
            else:
                os.rename(self.staging, final)
                fsync_path(self.dest)
        except OSError as e:
            raise DestinationError(e) from None
        checkpoint = MirroredCheckpoint(name=self.candidate.name, path=final, step=self.candidate.step,
                                        total_bytes=doc["total_bytes"], files=len(entries),
                                        mirrored_at=doc["mirrored_at"], source=doc["source"],
                                        completed_at=completed_at)
        return PublishResult(checkpoint, entries, copied, linked, time.monotonic() - started, mirrored_time)

    def _ensure_source_unchanged(self, files: list[SourceFile]) -> None:
        """Each file was read whole and unchanged; the set must be one moment's too. A shard rewritten after
        it was copied, or a file added, would otherwise publish two saves mixed."""
        try:
            after = {f.rel: (f.size, f.mtime_ns, f.ino) for f in walk_files(self.candidate.path)
                     if f.rel != MANIFEST_NAME}
            stamps = tree_stamps(self.candidate.path) if self.candidate.stamps is not None else None
        except OSError as e:
            raise SourceError(e) from None
        if stamps != self.candidate.stamps:
            # Not the tree the rules judged: entries added or removed (what is left of a checkpoint being
            # deleted, or not yet all of one being saved), or a file reopened since.
            moved = sorted(set(stamps or ()) ^ set(self.candidate.stamps or ()))
            raise SourceChanged(f"{self.candidate.path / moved[0][0]} changed, or entries were added or removed, "
                                f"since {self.candidate.name} was judged complete")
        before = {f.rel: (f.size, f.mtime_ns, f.ino) for f in files}
        changed = sorted(rel for rel in after.keys() | before.keys() if after.get(rel) != before.get(rel))
        if changed:
            raise SourceChanged(f"{self.candidate.path / changed[0]} changed while {self.candidate.name} was "
                                f"copied ({len(changed)} file(s) differ)")

    def _make_dirs(self, files: list[SourceFile]) -> set[Path]:
        rels = {""}
        for f in files:
            parent = posixpath.dirname(f.rel)
            while parent not in rels:
                rels.add(parent)
                parent = posixpath.dirname(parent)
        dirs = {self.staging / rel if rel else self.staging for rel in rels}
        try:
            for d in sorted(dirs, key=lambda p: len(p.parts)):
                os.mkdir(d)
        except OSError as e:
            raise DestinationError(e) from None
        return dirs

    def _stage_all(self, files: list[SourceFile]) -> tuple[list[ManifestFile], int, int]:
        """Stage every file, the biggest first; the first failure cancels the rest and is raised."""
        results: dict[str, tuple[ManifestFile, int, int]] = {}
        first_error: BaseException | None = None
        with ThreadPoolExecutor(max_workers=min(self.workers, max(1, len(files))),
                                thread_name_prefix="mirror-copy") as pool:
            futures = [pool.submit(self._stage_one, f) for f in sorted(files, key=lambda f: -f.size)]
            for future in as_completed(futures):
                try:
                    entry, copied, linked = future.result()
                    results[entry.path] = (entry, copied, linked)
                except Cancelled:
                    pass
                except BaseException as e:  # noqa: BLE001 - re-raised below, after every worker stopped
                    self.cancel.set()
                    first_error = first_error or e
        if first_error is not None:
            raise first_error
        ordered = [results[f.rel] for f in files]
        return [r[0] for r in ordered], sum(r[1] for r in ordered), sum(r[2] for r in ordered)

    def _stage_one(self, f: SourceFile) -> tuple[ManifestFile, int, int]:
        if self.cancel.is_set():
            raise Cancelled()
        try:
            staged = self._copy_or_link(f)
        except BaseException:
            self.cancel.set()
            raise
        self.progress()
        return staged

    def _copy_or_link(self, f: SourceFile) -> tuple[ManifestFile, int, int]:
        dst = f"{self.staging}/{f.rel}"   # a string: no Path parsing per file
        settled = self.identity_settled(f)
        same = self.index.same_file(f)
        if same is not None and same.algorithm == DEFAULT_HASH and self._link(same.path, dst, f.size):
            return self._entry(f, same.digest, same.probe, settled), 0, f.size
        expected = None
        if self.index.worth_hashing(f, probe_source):
            expected = hash_source(f, self.cancel, self.index.algorithms(f.size))
            known = self.index.find(expected.digests, f.size)
            if known is not None and self._link(known.path, dst, f.size):
                return self._entry(f, expected.digest, expected.probe, settled), 0, f.size
        copied = copy_and_hash(f, dst, self.cancel)
        if expected is not None and copied.digest != expected.digest:
            raise SourceChanged(f"{f.path} changed between hashing and copying")
        return self._entry(f, copied.digest, copied.probe, settled), f.size, 0

    @staticmethod
    def _entry(f: SourceFile, digest: str, probe: str | None, settled: bool) -> ManifestFile:
        if not settled:
            return ManifestFile(f.rel, f.size, digest, f.mtime_ns, probe)
        return ManifestFile(f.rel, f.size, digest, f.mtime_ns, probe, ino=f.ino, ctime_ns=f.ctime_ns)

    @staticmethod
    def _link(published: Path, dst: str, size: int) -> bool:
        try:
            link_published(published, dst)
            if os.stat(dst).st_size == size:
                return True
        except OSError as e:
            if is_out_of_space(e):
                raise DestinationError(e) from None
        try:  # the published file vanished or cannot be linked: copy instead
            os.unlink(dst)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise DestinationError(e) from None
        return False

    def _check_sizes(self, entries: list[ManifestFile]) -> None:
        staging = os.fspath(self.staging)
        for entry in entries:
            path = f"{staging}/{entry.path}"
            try:
                st = os.stat(path)
                size = st.st_size
                if st.st_mode & 0o777 != READ_ONLY:   # a reflink (copies are created read-only)
                    os.chmod(path, READ_ONLY)
            except OSError as e:
                raise DestinationError(e) from None
            if size != entry.size:
                raise PublishFailed("CopyFailed", f"staged {path} has {size} bytes, expected {entry.size}")

    def _write_manifest(self, doc: dict[str, Any]) -> None:
        # One line per file, each by json's C encoder (an indented dump runs the pure-Python one).
        head = json.dumps({k: v for k, v in doc.items() if k != "files"})
        files = ",\n".join(json.dumps(f, separators=(",", ":")) for f in doc["files"])
        data = f'{head[:-1]}, "files": [\n{files}\n]}}\n'.encode()
        fd = os.open(self.staging / MANIFEST_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, READ_ONLY)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
