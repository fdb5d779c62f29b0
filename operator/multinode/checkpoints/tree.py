"""Walking a checkpoint directory: its files, and a snapshot that changes whenever any of them does.

The cache is written by the trainer, and the mirror reads it with rights the trainer lacks (its own
ServiceAccount token, the checkpoint volume it writes), so nothing in a checkpoint is trusted:

- The walk opens each directory with O_NOFOLLOW and lists it through that descriptor: it never enters a
  symlink, and a directory swapped for one between two looks is not entered either.
- A symlink is copied as the file it points to only when that file is itself a regular file of the same
  checkpoint, found by the walk. One that leaves the checkpoint (`/etc/hostname`, `../other`, the mirror's
  token), or names a directory (the tree twice, or a loop), refuses the whole checkpoint.
- Anything but directories, regular files and symlinks (a FIFO, a socket, a device) refuses it: nothing
  opens them, so a FIFO cannot hang the mirror and `/dev/zero` cannot fill the destination.
- Files are opened with O_NOFOLLOW|O_NONBLOCK and checked with fstat (open_regular) before a byte is read.

A refusal is raised as reasons.RefusedEntry.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from multinode.checkpoints.names import is_temporary_file
from multinode.checkpoints.reasons import Refusal, RefusedEntry

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO that no one writes returns at once instead of waiting for a writer.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class SourceFile:
    rel: str        # relative path, "/"-separated
    path: Path      # where it is read from: for a symlink inside the checkpoint, the file it points to
    size: int
    mtime_ns: int
    ino: int
    ctime_ns: int = 0
    dev: int = 0

    def identity(self) -> tuple[int, int, int, int, int]:
        """What a later open must find: the same inode, unchanged (copying.py checks it with fstat)."""
        return (self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)


def kind_of(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink")):
        if test(mode):
            return word
    return "regular file" if stat.S_ISREG(mode) else "special file"


def open_regular(path: str | Path) -> tuple[int, os.stat_result]:
    """Open a file of the cache for reading, and its fstat: only a regular file, never through a symlink in
    its last component, never waiting (a FIFO). Raises RefusedEntry for anything else, OSError on errors."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RefusedEntry(Refusal.UNSAFE_SYMLINK, f"{path} is a symlink where a file was") from None
        if e.errno == errno.ENXIO:   # a socket (or a device without its driver)
            raise RefusedEntry(Refusal.SPECIAL_FILE, f"{path} is not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise RefusedEntry(Refusal.SPECIAL_FILE, f"{path} is a {kind_of(st.st_mode)}, not a regular file")
    return fd, st


@dataclass
class _Tree:
    """One walk's findings: directories ("" is the root, others end with "/"), regular files, symlinks."""

    real_root: str
    dirs: list[tuple[str, os.stat_result]] = field(default_factory=list)
    files: dict[str, os.stat_result] = field(default_factory=dict)
    links: dict[str, os.stat_result] = field(default_factory=dict)


def _list(fd: int, prefix: str, tree: _Tree) -> list[str]:
    """Record the entries of the directory open as `fd`; return its subdirectories' names, sorted."""
    subdirs = []
    with os.scandir(fd) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            rel = prefix + entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                subdirs.append(entry.name)
            elif stat.S_ISREG(st.st_mode):
                tree.files[rel] = st
            elif stat.S_ISLNK(st.st_mode):
                tree.links[rel] = st
            else:
                raise RefusedEntry(Refusal.SPECIAL_FILE, f"{rel} is a {kind_of(st.st_mode)}: a checkpoint holds "
                                                         "only regular files and directories")
    return subdirs


def _real_root(fd: int, root: Path) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:   # no /proc: the path, resolved (the root itself was opened without following a link)
        return os.path.realpath(root)


def _read_tree(root: Path) -> _Tree:
    """Every entry under `root`, by descriptors opened with O_NOFOLLOW (at most one per level of depth open).

    Raises OSError when the tree cannot be read (FileNotFoundError when part of it vanished; ELOOP or
    ENOTDIR when `root` is not a directory) and RefusedEntry for a FIFO, socket or device.
    """
    top = os.open(root, _DIRECTORY_FLAGS)
    tree = _Tree(_real_root(top, root))
    stack: list[tuple[str, int, list[str]]] = []
    try:
        tree.dirs.append(("", os.fstat(top)))
        stack.append(("", top, _list(top, "", tree)[::-1]))
        while stack:
            prefix, fd, pending = stack[-1]
            if not pending:
                os.close(fd)
                stack.pop()
                continue
            name = pending.pop()
            sub, sub_prefix = os.open(name, _DIRECTORY_FLAGS, dir_fd=fd), f"{prefix}{name}/"
            stack.append((sub_prefix, sub, []))   # on the stack before listing it: closed whatever happens
            tree.dirs.append((sub_prefix, os.fstat(sub)))
            stack[-1] = (sub_prefix, sub, _list(sub, sub_prefix, tree)[::-1])
    finally:
        for _, fd, _ in stack:
            os.close(fd)
    return tree


def _link_target(tree: _Tree, rel: str) -> str | None:
    """The relative path of the regular file of the checkpoint that the symlink `rel` points to; None when
    it points nowhere (dangling: nothing to copy). Raises RefusedEntry when it leaves the checkpoint or
    names a directory, OSError (ELOOP) for a loop."""
    link = os.path.join(tree.real_root, rel)
    try:
        target = os.path.realpath(link, strict=True)
    except FileNotFoundError:
        return None
    inside = target.startswith(tree.real_root + os.sep)
    target_rel = target[len(tree.real_root) + 1:].replace(os.sep, "/") if inside else None
    if target_rel is not None and target_rel in tree.files:
        return target_rel
    try:
        shown = os.readlink(link)
    except OSError:
        shown = target
    if not inside and target != tree.real_root:
        raise RefusedEntry(Refusal.UNSAFE_SYMLINK, f"{rel} is a symlink to {shown}, outside the checkpoint")
    raise RefusedEntry(Refusal.UNSAFE_SYMLINK, f"{rel} is a symlink to {shown}, a directory or not a regular file "
                                               "of the checkpoint: only links to its files are copied (as the file)")


def _prefix_path(root: Path, rel: str) -> Path:
    return root / rel if rel else root


def tree_stamps(root: Path) -> tuple[tuple[str, int, int, int, int], ...]:
    """(relative path, size, mtime_ns, inode, ctime_ns) of every file under `root` (temporary ones too), every
    symlink (its own inode: retargeting one makes a new one) and every directory (`<path>/`, size -1).
    Adding, removing or renaming an entry anywhere changes a directory's mtime: a save in progress, or a
    deletion (a trainer's own retention) that a file-level look would take for a smaller, complete
    checkpoint. A file's size changes at once when a save reopens it with O_TRUNC, its mtime only after
    (ext4 takes milliseconds in between, seen by tools/bench/mirror_chaos.py)."""
    tree = _read_tree(root)
    stamps = [(prefix or "./", -1, st.st_mtime_ns, st.st_ino, st.st_ctime_ns) for prefix, st in tree.dirs]
    for rel, st in [*tree.files.items(), *tree.links.items()]:
        stamps.append((rel, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns))
    for rel in tree.links:
        _link_target(tree, rel)   # refuses a link out of the checkpoint before anything is judged
    return tuple(sorted(stamps))


def holds_files(root: Path) -> bool:
    """Whether any file is under `root`: an empty tree is never a complete checkpoint, whatever the rules
    say of its name (a save that has not written yet, or a deletion that removed every file)."""
    return bool(_read_tree(root).files)


def walk_files(root: Path, *, include_temporary: bool = False) -> list[SourceFile]:
    """Every regular file under `root`, and every symlink to one of them (as that file), sorted by relative
    path.

    Raises OSError when the tree cannot be read: FileNotFoundError when it, or part of it, vanished; and
    RefusedEntry when it holds a special file or a symlink that leaves it.
    """
    tree = _read_tree(root)
    found = {rel: (rel, st) for rel, st in tree.files.items()}
    for rel in tree.links:
        target = _link_target(tree, rel)
        if target is not None:
            found[rel] = (target, tree.files[target])
    files = []
    for rel, (target, st) in found.items():
        if include_temporary or not is_temporary_file(rel.rpartition("/")[2]):
            files.append(SourceFile(rel, _prefix_path(root, target), st.st_size, st.st_mtime_ns, st.st_ino,
                                    st.st_ctime_ns, st.st_dev))
    files.sort(key=lambda f: f.rel)
    return files


@dataclass(frozen=True)
class Snapshot:
    """(relative path, size, mtime_ns) of every file, reduced to a digest, and the newest mtime (the
    directory's own included): a time of the cache's clock, never compared with the mirror's."""

    digest: str
    files: int
    newest_mtime_ns: int


def take_snapshot(root: Path) -> Snapshot:
    tree_mtime = os.stat(root, follow_symlinks=False).st_mtime_ns
    files = walk_files(root, include_temporary=True)
    h = hashlib.blake2b(digest_size=16)
    for f in files:
        h.update(f"{f.rel}\0{f.size}\0{f.mtime_ns}\n".encode())
    return Snapshot(h.hexdigest(), len(files), max([tree_mtime, *(f.mtime_ns for f in files)]))
