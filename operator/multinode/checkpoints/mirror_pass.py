"""The mirror: one pass copies the complete checkpoints of a job's cache into the backed-up volume.

A pass: take the destination's lock, remove leftovers of a crashed pass, read what is published, scan
the source, publish what is complete and not yet published (the newest `keep`, oldest first), then prune
down to `keep`. Expected faults never raise: each becomes a MirrorProblem with a CamelCase reason, logged
as one WARNING line, and the caller reports them.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from multinode.checkpoints.dedupe import IDENTITY_MARGIN, DedupeIndex, Sightings
from multinode.checkpoints.layouts import Completion
from multinode.checkpoints.manifest import (
    ManifestFile,
    MirroredCheckpoint,
    published_order,
    read_published,
    rfc3339,
)
from multinode.checkpoints.names import order_key
from multinode.checkpoints.publish import PublishFailed, publish
from multinode.checkpoints.reasons import RefusedEntry
from multinode.checkpoints.replacing import LEFTOVER_PREFIXES, recover
from multinode.checkpoints.scan import CheckpointCandidate, rejudge, scan_checkpoints
from multinode.checkpoints.settle import SettleTracker
from multinode.checkpoints.tree import walk_files
from multinode.checkpoints.waiting import DEFAULT_STALLED_SECONDS, IncompleteCheckpoint, IncompleteTracker

TRASH_PREFIX = ".trash-"
LOCK_NAME = ".mirror.lock"
MB = 1_000_000


@dataclass
class MirrorProblem:
    reason: str       # CamelCase: CacheUnavailable, SourceVanished, SourceChanged, CheckpointStalled, ...
    message: str
    checkpoint: str | None = None


@dataclass
class SyncReport:
    mirrored: list[MirroredCheckpoint] = field(default_factory=list)   # published in this pass
    pruned: list[str] = field(default_factory=list)
    problems: list[MirrorProblem] = field(default_factory=list)
    latest: MirroredCheckpoint | None = None    # newest valid published checkpoint after the pass
    bytes_copied: int = 0
    bytes_linked: int = 0
    seconds: float = 0.0
    lag_seconds: list[float] = field(default_factory=list)   # per mirrored: published - first seen complete
    not_ready: dict[str, str] = field(default_factory=dict)   # checkpoint in the cache -> why it is not complete
    incomplete: list[IncompleteCheckpoint] = field(default_factory=list)   # the same with reason codes, oldest first
    scanned: bool = False   # the cache was read: not_ready and incomplete say what is in it (else they are empty)


class _Busy(Exception):
    pass


class Mirror:
    """Mirrors `source` (the job's cache directory) into `dest` (the job's directory on the backed-up volume).

    `pinned()` names checkpoints that must not be pruned nor replaced (names or paths; the one a running
    attempt resumed from, those other jobs resume from); when it raises, nothing is. `clock` is the wall
    clock, for the times the mirror reports (lag, completedAt, since); `monotonic` measures how long
    something stayed the same (the settle rule, CheckpointStalled, the dedupe identities): both are the
    mirror's own, never compared with a file's times. Tests inject them. `stalled_seconds`: how long the
    newest checkpoint may stay incomplete and unchanged before each pass reports it as problem
    CheckpointStalled (waiting.py). `progress()` is called as the pass moves on (each checkpoint scanned,
    each file staged), for a liveness check that a long copy does not trip.
    """

    def __init__(self, source: Path, dest: Path, *, completion: Completion = Completion.AUTO, keep: int = 3,
                 workers: int = 8, settle_seconds: float = 60.0, pinned: Callable[[], set[str]] = lambda: set(),
                 log: logging.Logger | None = None, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, world_size: int | None = None,
                 stalled_seconds: float = DEFAULT_STALLED_SECONDS, progress: Callable[[], None] = lambda: None) -> None:
        self.source, self.dest = Path(source), Path(dest)
        self.completion = Completion(completion)
        self.keep, self.workers, self.settle_seconds = keep, workers, settle_seconds
        self.pinned, self.clock, self.monotonic, self.progress = pinned, clock, monotonic, progress
        self.world_size = world_size   # the job's ranks: per-rank files tell completeness (layouts.py)
        self.log = log or logging.getLogger("multinode.checkpoints")
        self._settle = SettleTracker()
        self._sightings = Sightings()
        self._first_complete: dict[str, float] = {}
        self._incomplete = IncompleteTracker(stalled_seconds)

    def sync_once(self, *, final: bool = False) -> SyncReport:
        """One pass. `final=True` once the job has ended: nothing is being written, so nothing needs to settle."""
        started = time.monotonic()
        report = SyncReport()
        try:
            self.dest.mkdir(parents=True, exist_ok=True)
            with self._locked():
                self._pass(report, final)
        except _Busy:
            self._problem(report, "DestinationBusy", f"another mirror holds {self.dest / LOCK_NAME}")
        except OSError as e:
            self._problem(report, "DestinationUnavailable", f"{self.dest}: {e.strerror or e}")
        report.seconds = time.monotonic() - started
        return report

    def _pass(self, report: SyncReport, final: bool) -> None:
        self._remove_leftovers(report)
        published, corrupt = read_published(self.dest)
        candidates = self._scan(report, final)
        complete = [c for c in candidates if c.complete]
        self._report_incomplete(report, candidates)
        for refused in candidates:
            if refused.refusal is not None:
                self._problem(report, refused.refusal, f"{refused.path} is not mirrored: {refused.why}",
                              refused.name)
        kept = self._kept(complete, [c for c, _ in published])
        wanted = [c for c in complete if c.name in kept]
        occupied = {c.name for c, _ in published}
        for name, error in corrupt.items():
            if any(c.name == name for c in wanted):
                fate = "moved aside and mirrored again"
            elif any(c.name == name for c in complete):
                fate = f"moved aside; older than the newest {self.keep}, so not mirrored again"
            else:
                fate = "left as is: the cache has no complete copy to replace it with"
            self._problem(report, "CorruptManifest", f"{error}; {fate}", name)
            if fate.startswith("left") or not self._discard(self.dest / name, report, name):
                occupied.add(name)

        pinned, pinned_error = self._read_pinned()
        index = _dedupe_index(published)
        files_of = {c.name: files for c, files in published}
        for candidate in wanted:
            # A published checkpoint is published again when its source was saved again; never a pinned
            # one (or any, when the pinned ones are unknown): an attempt is reading it.
            replace = candidate.name in occupied
            if replace and (pinned is None or candidate.name in pinned
                            or not _rewritten(candidate, files_of.get(candidate.name))):
                continue
            if not self._publish(candidate, index, published, report, replace=replace) and \
                    report.problems[-1].reason == "DestinationFull":
                break   # the next checkpoint would not fit either
            if replace:   # the index named files of the version just replaced
                index = _dedupe_index(published)
        published.sort(key=lambda item: published_order(item[0]))
        if published and pinned is None:
            self._problem(report, "PinnedUnknown", f"cannot tell which checkpoints are pinned ({pinned_error}); "
                                                   "nothing pruned")
        elif published:
            self._prune([c for c, _ in published], kept, pinned or set(), report)
        report.latest = published[-1][0] if published else None

    def _scan(self, report: SyncReport, final: bool) -> list[CheckpointCandidate]:
        try:
            candidates = scan_checkpoints(self.source, self.completion, settle_seconds=self.settle_seconds,
                                          now=self.monotonic(), final=final, settle=self._settle,
                                          world_size=self.world_size, progress=self.progress)
        except OSError as e:
            self._problem(report, "CacheUnavailable", f"cannot read the cache directory {self.source}: "
                                                      f"{e.strerror or e}")
            return []
        report.scanned = True
        self._sightings.observe((stamp for c in candidates for stamp in c.stamps or ()), self.monotonic())
        now = self.clock()
        for c in candidates:
            if c.complete:
                self._first_complete.setdefault(c.name, now)
        present = {c.name for c in candidates}
        self._first_complete = {n: t for n, t in self._first_complete.items() if n in present}
        return candidates

    def _report_incomplete(self, report: SyncReport, candidates: list[CheckpointCandidate]) -> None:
        report.incomplete = self._incomplete.observe(candidates, self.clock())
        report.not_ready = {c.name: c.message for c in report.incomplete}
        stalled = self._incomplete.stalled(candidates, self.monotonic())
        if stalled:
            self._problem(report, "CheckpointStalled", stalled, candidates[-1].name)

    def _kept(self, complete: list[CheckpointCandidate], published: list[MirroredCheckpoint]) -> set[str]:
        """The one answer to "which checkpoints do we keep", for publishing and pruning alike: the newest
        `keep` of everything complete, in the cache or already published. Two answers (the newest complete
        in the cache for one, the newest published for the other) disagreed whenever the cache's newest was
        being rewritten, and each pass published an old checkpoint only to prune it again."""
        steps = {c.name: c.step for c in complete}
        steps.update({c.name: c.step for c in published})
        # Step order; a checkpoint without a step sorts first (names.order_key), ties by name.
        ordered = sorted(steps, key=lambda name: (order_key(steps[name], 0), name))
        return set(ordered[-max(1, self.keep):])

    def _read_pinned(self) -> tuple[set[str] | None, str]:
        """The names `pinned()` gives (names or paths), or None and why when it fails."""
        try:
            return {Path(p).name for p in self.pinned()}, ""
        except Exception as e:  # noqa: BLE001 - the caller's callback: without it, pruning is unsafe
            return None, str(e)

    def _publish(self, candidate: CheckpointCandidate, index: DedupeIndex,
                 published: list[tuple[MirroredCheckpoint, list[ManifestFile]]],
                 report: SyncReport, replace: bool = False) -> bool:
        first_complete = self._first_complete.get(candidate.name)
        # A file's identity goes into the manifest only if this mirror saw it unchanged a margin before now.
        cutoff = self.monotonic() - IDENTITY_MARGIN
        try:
            result = publish(candidate, self.dest, index=index, workers=self.workers, clock=self.clock,
                             completed_at=rfc3339(first_complete) if first_complete is not None else None,
                             replace=replace, recheck=lambda: rejudge(candidate, self.source, self.completion,
                                                                      world_size=self.world_size),
                             identity_settled=lambda f: self._sightings.seen_by(f, cutoff), progress=self.progress)
        except PublishFailed as e:
            self._problem(report, e.reason, e.message, candidate.name)
            return False
        except OSError as e:   # anything the publisher did not expect is still only this checkpoint's fault
            self._problem(report, "CopyFailed", f"{candidate.name}: {e}", candidate.name)
            return False
        index.add(result.checkpoint.path, result.files)
        published[:] = [(c, f) for c, f in published if c.name != candidate.name]
        published.append((result.checkpoint, result.files))
        report.mirrored.append(result.checkpoint)
        report.bytes_copied += result.copied_bytes
        report.bytes_linked += result.linked_bytes
        if first_complete is not None:
            report.lag_seconds.append(max(0.0, result.mirrored_time - first_complete))
        rate = result.copied_bytes / MB / result.seconds if result.seconds > 0 else 0.0
        self.log.info("mirrored %s (step %s): %.1f MB copied, %.1f MB linked in %.2fs (%.0f MB/s)",
                      candidate.name, candidate.step, result.copied_bytes / MB, result.linked_bytes / MB,
                      result.seconds, rate)
        return True

    def _prune(self, published: list[MirroredCheckpoint], kept: set[str], pinned: set[str],
               report: SyncReport) -> None:
        """Keep what `_kept` keeps, the newest published whatever `keep` says, and every pinned one."""
        keep = {c.name for c in published if c.name in kept}
        # A kept checkpoint that failed to publish (a full volume) leaves its place to the newest older ones.
        short = max(1, self.keep) - len(keep)
        if short > 0:
            keep |= set([c.name for c in published if c.name not in keep][-short:])
        keep |= {published[-1].name} | pinned
        for checkpoint in published:
            if checkpoint.name not in keep and self._discard(checkpoint.path, report, checkpoint.name):
                report.pruned.append(checkpoint.name)
                self.log.info("pruned %s (step %s)", checkpoint.name, checkpoint.step)

    def _discard(self, path: Path, report: SyncReport, name: str) -> bool:
        """Rename to .trash-* first, so a half-deleted directory never looks published; then delete."""
        trash = self.dest / f"{TRASH_PREFIX}{path.name[:200]}-{secrets.token_hex(4)}"
        try:
            os.rename(path, trash)
        except OSError as e:
            self._problem(report, "PruneFailed", f"cannot move {path} aside: {e.strerror or e}", name)
            return False
        shutil.rmtree(trash, ignore_errors=True)   # a leftover is removed by the next pass
        return True

    def _remove_leftovers(self, report: SyncReport) -> None:
        """Staging, set-aside and trash directories of a pass that crashed (we hold the lock: no pass is
        running); first, a whole version of a checkpoint whose replacement a crash interrupted is put back."""
        for name in recover(self.dest):
            self.log.info("put back %s, whose replacement a crash interrupted", name)
        for entry in os.scandir(self.dest):
            if entry.name.startswith((*LEFTOVER_PREFIXES, TRASH_PREFIX)) and not entry.is_symlink() and entry.is_dir():
                shutil.rmtree(entry.path, ignore_errors=True)
                if os.path.lexists(entry.path):
                    self._problem(report, "CleanupFailed", f"cannot remove {entry.path}")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.dest / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _Busy() from None
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                # The filesystem cannot lock: one mirror per job is the deployment's guarantee then.
            yield
        finally:
            os.close(fd)

    def _problem(self, report: SyncReport, reason: str, message: str, checkpoint: str | None = None) -> None:
        report.problems.append(MirrorProblem(reason, message, checkpoint))
        self.log.warning("%s: %s", reason, message)


def _dedupe_index(published: list[tuple[MirroredCheckpoint, list[ManifestFile]]]) -> DedupeIndex:
    index = DedupeIndex()
    for checkpoint, files in published:
        index.add(checkpoint.path, files)
    return index


def _rewritten(candidate: CheckpointCandidate, files: list[ManifestFile] | None) -> bool:
    """The cache's copy of a published checkpoint was saved again (and is complete again): its files
    differ from the manifest's. Not when files are missing: a save writes files, it does not remove them,
    so that is a deletion in progress (the trainer's own retention), and what is left of the checkpoint
    must not replace the published whole."""
    if files is None:
        return False
    try:
        now = {f.rel: (f.size, f.mtime_ns) for f in walk_files(candidate.path)}
    except (OSError, RefusedEntry):
        return False
    published = {f.path: (f.size, f.mtime_ns) for f in files}
    # A size that changed under an unchanged mtime is a write caught midway: a shrinking truncate (a save
    # reopening the file) sets the size before the times, and ext4 may take milliseconds in between.
    midway = any(now[rel][1] == mtime and now[rel][0] != size for rel, (size, mtime) in published.items()
                 if rel in now)
    return now != published and published.keys() <= now.keys() and not midway
