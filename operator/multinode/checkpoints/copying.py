"""Moving bytes: copy-while-hashing, hashing without copying, linking a published file, fsync.

The hashes themselves are in hashing.py.

Every failure is raised as one of three kinds, so the publisher can say whose fault it was: SourceError
(reading the cache: a vanished file is FileNotFoundError inside), DestinationError (writing the backed-up
volume: ENOSPC inside means it is full), SourceChanged (a file changed while it was read).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from io import FileIO
from pathlib import Path

from multinode.checkpoints.hashing import DEFAULT_HASH, ProbeCollector, new_hash, probe_open
from multinode.checkpoints.tree import SourceFile, open_regular

BUFFER_SIZE = 8 << 20
FICLONE = 0x40049409          # ioctl(dst_fd, FICLONE, src_fd): share extents (btrfs, XFS, bcachefs)
READ_ONLY = 0o444   # published files are immutable: hard links to them are safe


class SourceError(Exception):
    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class DestinationError(Exception):
    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class SourceChanged(Exception):
    pass


class Cancelled(Exception):
    """Another file of the same checkpoint failed: stop early, the checkpoint is abandoned."""


_per_thread = threading.local()


def _buffer() -> bytearray:
    """The calling thread's buffer, made once per copy thread: checkpoints can hold thousands of small
    files, and zeroing a buffer for each cost more CPU than copying it."""
    buf = getattr(_per_thread, "buffer", None)
    if buf is None:
        buf = _per_thread.buffer = bytearray(BUFFER_SIZE)
    return buf


def write_all(fd: int, data: memoryview) -> None:
    """os.write until everything is written (the one place bytes reach the destination)."""
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's sync_file_range(2) through ctypes (the os module lacks it), or None where there is none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_sync_file_range = _load_sync_file_range()
_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4


def _flush_behind(fd: int, previous: int, start: int, end: int) -> None:
    """After writing [start, end): start writing it to disk, wait until the chunk before it, [previous,
    start), is on disk, and drop that chunk from the page cache.

    The disk is kept busy while the next chunk is read and hashed, so the final fsync has little left to
    wait for; and a multi-GB copy holds two chunks per file in memory instead of filling the page cache
    (which costs more CPU than the copy). Write errors surface here, early. Without sync_file_range,
    POSIX_FADV_DONTNEED does part of it (it starts writeback and drops clean pages).
    """
    global _sync_file_range  # noqa: PLW0603 - one unsupported filesystem answer turns it off for the process
    if _sync_file_range is not None:
        if _sync_file_range(fd, start, end - start, _WRITE) == 0 and (start == previous or _sync_file_range(
                fd, previous, start - previous, _WAIT_BEFORE | _WRITE | _WAIT_AFTER) == 0):
            _advise_dontneed(fd, previous, start)
            return
        error = ctypes.get_errno()
        if error not in (errno.EINVAL, errno.ESPIPE, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(error, os.strerror(error))
        _sync_file_range = None   # not on this filesystem: advice only from now on
    _advise_dontneed(fd, previous, end)


def _advise_dontneed(fd: int, start: int, end: int) -> None:
    if end > start:
        try:
            os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass   # advice only


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    # ctime as well as mtime: a writer that restores the mtime (utime) still moves the ctime.
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def ensure_unchanged(src: SourceFile, f: FileIO, before: os.stat_result) -> None:
    """Raise SourceChanged unless `src` still is the file we started reading: the open file unchanged (fstat),
    and its path still naming it (lstat: not replaced by another file, or by a symlink)."""
    try:
        after = os.fstat(f.fileno())
        named = os.stat(src.path, follow_symlinks=False)
    except OSError as e:
        raise SourceError(e) from None
    if _identity(after) != _identity(before) or after.st_size != src.size:
        raise SourceChanged(f"{src.path} changed while it was read (size {src.size} -> {after.st_size})")
    if (named.st_dev, named.st_ino) != (before.st_dev, before.st_ino):
        raise SourceChanged(f"{src.path} was replaced while it was read")


def _open_source(src: SourceFile) -> tuple[FileIO, os.stat_result]:
    """Open a file of the cache as the walk listed it: a regular file (tree.open_regular), the very inode the
    walk saw. A directory on its path swapped for a symlink after the walk leads to another inode: refused
    as a change, so nothing outside the checkpoint is ever read."""
    try:
        fd, before = open_regular(src.path)
    except OSError as e:
        raise SourceError(e) from None
    f = open(fd, "rb", buffering=0)  # noqa: SIM115 - returned open; the caller closes it
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)   # larger readahead
    except OSError:
        pass
    if (before.st_size, before.st_mtime_ns, before.st_ino, before.st_dev) != (src.size, src.mtime_ns, src.ino,
                                                                              src.dev):
        f.close()
        raise SourceChanged(f"{src.path} changed since it was listed")
    return f, before


def _ensure_within(src: SourceFile, read: int) -> None:
    """Stop a read that goes past the size the walk listed: the file grows (a writer appends), and what is
    read must never outgrow what was judged, however long the writer goes on."""
    if read > src.size:
        raise SourceChanged(f"{src.path} grew while it was read (listed with {src.size} bytes)")


def _read(f: FileIO, buf: bytearray) -> int | None:
    try:
        return f.readinto(buf)
    except OSError as e:
        raise SourceError(e) from None


@dataclass(frozen=True)
class Digests:
    digests: dict[str, str]   # algorithm -> hex digest of the whole file
    probe: str                # hashing.probe of the file, with DEFAULT_HASH

    @property
    def digest(self) -> str:
        return self.digests[DEFAULT_HASH]


def copy_and_hash(src: SourceFile, dst: str | Path, cancel: threading.Event) -> Digests:
    """Copy `src` to the new read-only file `dst`, hashing exactly the bytes written; fsync it.

    One read pass gives the content hash and the probe (no second read of either file)."""
    f, before = _open_source(src)
    h = new_hash(DEFAULT_HASH)
    sampled = ProbeCollector(src.size)
    buf = _buffer()
    view = memoryview(buf)
    copied = previous = 0
    try:
        try:
            # Created read-only (published files are immutable); the descriptor still writes.
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, READ_ONLY)
        except OSError as e:
            raise DestinationError(e) from None
        try:
            while n := _read(f, buf):
                if cancel.is_set():
                    raise Cancelled()
                _ensure_within(src, copied + n)
                chunk = view[:n]
                h.update(chunk)
                sampled.feed(copied, chunk)
                try:
                    write_all(fd, chunk)
                    if copied + n < src.size:   # more to come (the fsync below writes the last chunk)
                        _flush_behind(fd, previous, copied, copied + n)
                except OSError as e:
                    raise DestinationError(e) from None
                previous, copied = copied, copied + n
            try:
                os.fsync(fd)
            except OSError as e:
                raise DestinationError(e) from None
            ensure_unchanged(src, f, before)
        finally:
            os.close(fd)
    finally:
        f.close()
    if copied != src.size:
        raise SourceChanged(f"{src.path}: read {copied} bytes, expected {src.size}")
    return Digests({DEFAULT_HASH: h.hexdigest()}, sampled.digest())


def hash_source(src: SourceFile, cancel: threading.Event, algorithms: Collection[str] = frozenset()) -> Digests:
    """A source file's digests (DEFAULT_HASH and `algorithms`, those of older manifests it may match, all
    in one read) and probe, read only: to find out whether it can be linked instead of copied."""
    f, before = _open_source(src)
    hashes = {algorithm: new_hash(algorithm) for algorithm in {DEFAULT_HASH, *algorithms}}
    sampled = ProbeCollector(src.size)
    buf = _buffer()
    view = memoryview(buf)
    size = 0
    with f:
        while n := _read(f, buf):
            if cancel.is_set():
                raise Cancelled()
            _ensure_within(src, size + n)
            for h in hashes.values():
                h.update(view[:n])
            sampled.feed(size, view[:n])
            size += n
        ensure_unchanged(src, f, before)
    if size != src.size:
        raise SourceChanged(f"{src.path}: read {size} bytes, expected {src.size}")
    return Digests({algorithm: h.hexdigest() for algorithm, h in hashes.items()}, sampled.digest())


def probe_source(src: SourceFile, algorithm: str) -> str:
    f, _ = _open_source(src)
    with f:
        try:
            return probe_open(f.fileno(), src.size, algorithm)
        except OSError as e:
            raise SourceError(e) from None


def link_published(published: Path, dst: str | Path) -> str:
    """Make `dst` share `published`'s data: a reflink where the filesystem can, else a hard link.

    Published files are read-only and never rewritten, so a hard link is as safe as a copy. Returns
    "reflink" or "hardlink"; raises OSError when neither works (the caller copies instead).
    """
    src_fd = os.open(published, os.O_RDONLY | os.O_CLOEXEC)
    try:
        dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            fcntl.ioctl(dst_fd, FICLONE, src_fd)
            os.fsync(dst_fd)
            return "reflink"
        except OSError:
            pass
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    os.unlink(dst)
    os.link(published, dst)
    return "hardlink"


def fsync_path(path: Path) -> None:
    """fsync a directory (or file) by path, so the entries in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _load_renameat2() -> Callable[..., int] | None:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    except OSError:
        return None


_renameat2 = _load_renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap two directories in one step (Linux renameat2 RENAME_EXCHANGE): whoever opens `b` by path finds
    the old directory or the new one, never neither and never a mix. False where the C library or the
    filesystem (NFS) cannot exchange: nothing was moved, and the caller falls back (replacing.py)."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def is_out_of_space(error: OSError) -> bool:
    return error.errno in (errno.ENOSPC, errno.EDQUOT)
