"""Finding the checkpoints in a job's cache directory and telling which are complete."""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from multinode.checkpoints.layouts import (
    DEEPSPEED_TRACKER,
    MEGATRON_TRACKER,
    Completion,
    Evidence,
    SourceView,
    judge,
)
from multinode.checkpoints.names import never_taken, order_key, parse_step
from multinode.checkpoints.reasons import NotReady, Refusal, RefusedEntry
from multinode.checkpoints.settle import SettleTracker, settled_by_later_writes
from multinode.checkpoints.tree import Snapshot, holds_files, open_regular, take_snapshot, tree_stamps

_TRACKER_MAX_BYTES = 4096
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class CheckpointCandidate:
    """A checkpoint directory found in the source."""

    name: str
    path: Path
    step: int | None
    framework: str | None
    complete: bool
    why: str             # a human reason, whether complete or not
    mtime_ns: int = 0    # of the directory: orders checkpoints of equal step
    reason: NotReady | None = None   # when not complete: why, as a code (reasons.py)
    # Its files and directories from just before it was judged: what is published must be exactly that
    # (tree.tree_stamps). None: not recorded, not checked.
    stamps: tuple[tuple[str, int, int, int, int], ...] | None = None
    refusal: Refusal | None = None   # with reason REFUSED: which rule of the untrusted cache it breaks

    def __post_init__(self) -> None:
        if not self.complete and self.reason is None:
            raise ValueError(f"an incomplete candidate needs a NotReady reason: {self.name}: {self.why}")


def scan_checkpoints(source: Path, completion: Completion = Completion.AUTO, *, settle_seconds: float = 60.0,
                     now: float | None = None, final: bool = False,
                     settle: SettleTracker | None = None, world_size: int | None = None,
                     progress: Callable[[], None] = lambda: None) -> list[CheckpointCandidate]:
    """Every checkpoint directory directly under `source`, oldest first (by step, then mtime).

    `final=True` says the job has ended, so nothing is being written any more: the settle rule is then
    satisfied at once. `settle` remembers snapshots across calls (the Mirror passes its own), and `now` is
    its clock (the mirror's monotonic one); without it the settle rule compares file times with file
    times (settle.py). `progress` is called after each directory is judged. Raises OSError when `source`
    cannot be listed, or is a symlink (never followed).
    """
    source = Path(source)
    now = time.monotonic() if now is None else now
    entries = _list_source(source)
    names = {name for name, _ in entries}
    snapshots: dict[str, Snapshot] = {}
    cache_newest: list[int] = []

    def settled(name: str, path: Path) -> tuple[bool, str]:
        if name not in snapshots:
            snapshots[name] = take_snapshot(path)
        if settle is not None:
            return settle.check(name, snapshots[name], now, settle_seconds)
        if not cache_newest:
            cache_newest.append(_newest_write(source, entries))
        return settled_by_later_writes(snapshots[name], cache_newest[0], settle_seconds)

    view = _source_view(source, names, settled, settle_seconds, final, world_size)
    candidates = []
    for name, st in entries:
        candidate = _inspect(name, st, view, Completion(completion))
        if candidate is not None:
            candidates.append(candidate)
        progress()
    if settle is not None:
        settle.retain(c.name for c in candidates)
    return sorted(candidates, key=lambda c: (order_key(c.step, c.mtime_ns), c.name))


def _list_source(source: Path) -> list[tuple[str, os.stat_result | None]]:
    """The source's entries and their lstat (None: vanished), listed through a descriptor opened without
    following a symlink: a cache directory the trainer replaced by a link (to `/`, to the mirror's secrets)
    is not read at all."""
    try:
        fd = os.open(source, _DIRECTORY_FLAGS)
    except OSError as e:
        # O_DIRECTORY|O_NOFOLLOW on a symlink: ENOTDIR (ELOOP on some kernels).
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(source):
            raise OSError(errno.ELOOP, "it is a symlink, which the mirror never follows", str(source)) from None
        raise
    try:
        with os.scandir(fd) as it:
            return [(entry.name, _lstat(entry)) for entry in it]
    finally:
        os.close(fd)


def _lstat(entry: os.DirEntry[str]) -> os.stat_result | None:
    try:
        return entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None


def _newest_write(source: Path, entries: list[tuple[str, os.stat_result | None]]) -> int:
    """The newest mtime in the cache: of its entries, and of every file in its checkpoint directories."""
    newest = 0
    for name, st in entries:
        if st is None:
            continue
        newest = max(newest, st.st_mtime_ns)
        if stat.S_ISDIR(st.st_mode):
            try:
                newest = max(newest, take_snapshot(source / name).newest_mtime_ns)
            except (OSError, RefusedEntry):
                continue   # vanished, unreadable or refused: says nothing about when the trainer last wrote
    return newest


def _inspect(name: str, st: os.stat_result | None, view: SourceView,
             completion: Completion) -> CheckpointCandidate | None:
    # A symlink in the source is an alias (DeepSpeed's `latest` may be one), not a checkpoint.
    if st is None or name.startswith(".") or not stat.S_ISDIR(st.st_mode):
        return None
    mtime_ns = st.st_mtime_ns
    path, step = Path(view.source) / name, parse_step(name)
    why_not = never_taken(name)
    if why_not:
        return CheckpointCandidate(name, path, step, _temporary_framework(name), False, why_not, mtime_ns,
                                   NotReady.TEMPORARY_NAME)
    try:
        stamps = tree_stamps(path)
        evidence = judge(name, path, view, completion)
        if evidence.complete and not holds_files(path):
            evidence = Evidence(False, evidence.framework, "no file in it", NotReady.EMPTY)
    except FileNotFoundError:
        return None   # vanished while we looked
    except OSError as e:
        return CheckpointCandidate(name, path, step, None, False, f"cannot inspect: {e}", mtime_ns,
                                   NotReady.CANNOT_INSPECT)
    except RefusedEntry as e:
        return CheckpointCandidate(name, path, step, None, False, f"refused: {e.message}", mtime_ns,
                                   NotReady.REFUSED, refusal=e.reason)
    return CheckpointCandidate(name, path, step, evidence.framework or None, evidence.complete, evidence.why,
                               mtime_ns, evidence.reason, stamps)


def rejudge(candidate: CheckpointCandidate, source: Path, completion: Completion, *,
            world_size: int | None = None) -> str | None:
    """Why `candidate`, judged complete earlier, is not complete now; None when it still is.

    The mirror asks once it has copied the files and before it checks that they did not change while
    copied: so the state it publishes is one the rules call complete at a moment within the copy, not
    only at the scan (a shard rewritten in place between the scan and the copy leaves the directory
    looking the same, but no longer complete). The settle rule counts as met: it was at the scan.
    Raises RefusedEntry when the checkpoint now holds what the mirror refuses.
    """
    source = Path(source)
    try:
        names = {name for name, _ in _list_source(source)}
        view = _source_view(source, names, lambda name, path: (True, "settled at the scan"), 0.0, False, world_size)
        evidence = judge(candidate.name, candidate.path, view, Completion(completion))
        if evidence.complete and not holds_files(candidate.path):
            return "no file in it"
    except OSError as e:
        return f"cannot inspect: {e}"
    return None if evidence.complete else f"{evidence.reason}: {evidence.why}"


def _source_view(source: Path, names: set[str], settled: Callable[[str, Path], tuple[bool, str]],
                 settle_seconds: float, final: bool, world_size: int | None) -> SourceView:
    return SourceView(names=names, megatron_tracker=_read_tracker(source / MEGATRON_TRACKER),
                      deepspeed_tag=_read_tag(source / DEEPSPEED_TRACKER), settled=settled,
                      settle_seconds=settle_seconds, final=final, world_size=world_size, source=str(source))


def _temporary_framework(name: str) -> str | None:
    if ".orbax-checkpoint-tmp-" in name:
        return "orbax"
    if name.endswith("-unfinished"):
        return "nemo"
    if name.startswith("tmp-checkpoint-"):
        return "hf"
    return None


def _read_tracker(path: Path) -> str | None:
    """The first bytes of a tracker file (it names one checkpoint: a few bytes), never through a symlink and
    only from a regular file. One that is anything else is there but names nothing the rules can use."""
    try:
        fd, _ = open_regular(path)
    except FileNotFoundError:
        return None
    except RefusedEntry as e:
        what = "a symlink, not followed" if e.reason == Refusal.UNSAFE_SYMLINK else "not a regular file"
        return f"<{what}>"
    except OSError:
        return ""   # exists but unreadable: rules treat it as not naming anything
    with open(fd, "rb") as f:
        try:
            return f.read(_TRACKER_MAX_BYTES).decode("utf-8", "replace").strip()
        except OSError:
            return ""


def _read_tag(path: Path) -> str | None:
    """The tag DeepSpeed's `latest` names: the file's content, or a symlink's target."""
    if path.is_symlink():
        return os.path.basename(os.readlink(path).rstrip("/")) or None
    return _read_tracker(path) or None


def latest_complete_checkpoint(candidates: Iterable[CheckpointCandidate]) -> CheckpointCandidate | None:
    """The newest complete candidate (by step, then mtime), or None."""
    complete = [c for c in candidates if c.complete]
    return max(complete, key=lambda c: (order_key(c.step, c.mtime_ns), c.name)) if complete else None
