"""What the destination already holds, by content: (hash, digest) -> a published file that can be linked.

Built from the manifests of the published checkpoints at the start of every pass and extended as each
checkpoint is published, so it never points at a pruned or trashed file for long; a link to a file
that vanished anyway falls back to a copy. Manifests of older formats hash with sha256, newer ones with
hashing.DEFAULT_HASH: the index keeps each digest under its algorithm, and a file that may match is
hashed with every algorithm its candidates use, in one read.

A source file that is the very file an earlier manifest was made from (same inode, size, mtime and
ctime) is linked without being read at all: that is what makes re-mirroring a renamed checkpoint read
almost none of its bytes. The publisher records the identity only of files that this mirror saw with that
very identity at least IDENTITY_MARGIN_NS before the publish began (Sightings, on the mirror's monotonic
clock): the file's ctime was set before that look, so a rewrite after the copy lands in a later timestamp
granule and cannot keep it. File times are never compared with the mirror's clock: they come from the
clock of the node or server that wrote them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from multinode.checkpoints.hashing import PROBE_BLOCK
from multinode.checkpoints.manifest import ManifestFile
from multinode.checkpoints.tree import SourceFile


@dataclass(frozen=True)
class KnownFile:
    checkpoint_dir: Path
    rel: str
    size: int
    probe: str | None
    algorithm: str    # of `probe` (and of the digest it was found by)
    digest: str

    @property
    def path(self) -> Path:   # the published file (made on demand: most indexed files are never linked)
        return self.checkpoint_dir / self.rel


IDENTITY_MARGIN_NS = 2_000_000_000   # coarser than any filesystem's timestamps (FAT: 2 s)
IDENTITY_MARGIN = IDENTITY_MARGIN_NS / 1e9
Identity = tuple[int, int, int, int]   # (ino, size, mtime_ns, ctime_ns)


class Sightings:
    """When this mirror first saw each file identity, on its own monotonic clock: fed each pass with the
    stamps of every checkpoint the scan walked (tree.tree_stamps), and forgetting what it no longer sees."""

    def __init__(self) -> None:
        self._first: dict[Identity, float] = {}

    def observe(self, stamps: Iterable[tuple[str, int, int, int, int]], now: float) -> None:
        seen: dict[Identity, float] = {}
        for _, size, mtime_ns, ino, ctime_ns in stamps:
            if size >= 0:   # directories have size -1
                key = (ino, size, mtime_ns, ctime_ns)
                seen[key] = self._first.get(key, now)
        self._first = seen

    def seen_by(self, src: SourceFile, cutoff: float) -> bool:
        """Whether `src`, with its identity now, was seen at or before `cutoff` (the mirror's clock)."""
        first = self._first.get((src.ino, src.size, src.mtime_ns, src.ctime_ns))
        return first is not None and first <= cutoff
PROBE_SAMPLED = 3 * PROBE_BLOCK       # what the probe reads at most


class DedupeIndex:
    def __init__(self) -> None:
        self._by_digest: dict[tuple[str, str], KnownFile] = {}   # (algorithm, digest)
        self._hints: set[tuple[str, int, int]] = set()          # (relative path, size, source mtime_ns)
        self._probes: set[tuple[str, int, str]] = set()         # (algorithm, size, probe)
        self._sizes_without_probe: set[int] = set()
        self._algorithms_by_size: dict[int, set[str]] = {}
        self._identities: dict[tuple[int, int, int, int], KnownFile] = {}   # (ino, size, mtime_ns, ctime_ns)

    def add(self, checkpoint_dir: Path, files: list[ManifestFile]) -> None:
        for f in files:
            if f.size == 0:
                continue
            known = KnownFile(checkpoint_dir, f.path, f.size, f.probe, f.algorithm, f.digest)
            self._by_digest.setdefault((f.algorithm, f.digest), known)
            if f.ino is not None and f.mtime_ns is not None and f.ctime_ns is not None:
                self._identities.setdefault((f.ino, f.size, f.mtime_ns, f.ctime_ns), known)
            self._algorithms_by_size.setdefault(f.size, set()).add(f.algorithm)
            if f.mtime_ns is not None:
                self._hints.add((f.path, f.size, f.mtime_ns))
            if f.probe is None:
                self._sizes_without_probe.add(f.size)
            else:
                self._probes.add((f.algorithm, f.size, f.probe))

    def same_file(self, src: SourceFile) -> KnownFile | None:
        """The published copy of `src` when `src` is the very file it was made from, unchanged since."""
        return self._identities.get((src.ino, src.size, src.mtime_ns, src.ctime_ns)) if src.size else None

    def worth_hashing(self, src: SourceFile, probe_of: Callable[[SourceFile, str], str]) -> bool:
        """Whether `src` may already be published, so hashing it first (read only) may save its copy.

        Yes when an earlier manifest lists the same relative path, size and mtime; or a file of its size
        whose sampled blocks match. A same-size file with other content is then copied in one pass. A file
        the probe would read (nearly) whole is hashed straight away: the probe would cost the same read.
        """
        algorithms = self.algorithms(src.size)
        if src.size == 0 or not algorithms:
            return False
        if (src.rel, src.size, src.mtime_ns) in self._hints or src.size in self._sizes_without_probe \
                or src.size <= PROBE_SAMPLED:
            return True
        return any((algorithm, src.size, probe_of(src, algorithm)) in self._probes for algorithm in algorithms)

    def algorithms(self, size: int) -> set[str]:
        """The hashes of the published files of this size (what a source file must be hashed with)."""
        return self._algorithms_by_size.get(size, set())

    def find(self, digests: dict[str, str], size: int) -> KnownFile | None:
        """A published file with one of `digests` (algorithm -> digest) and this size."""
        for algorithm, digest in digests.items():
            known = self._by_digest.get((algorithm, digest))
            if known is not None and known.size == size:
                return known
        return None

    def __len__(self) -> int:
        return len(self._by_digest)
