"""What the destination already holds, by content: sha256 -> a published file that can be linked.

Built from the manifests of the published checkpoints at the start of every pass and extended as each
checkpoint is published, so it never points at a pruned or trashed file for long; a link to a file
that vanished anyway falls back to a copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from multinode.checkpoints.manifest import ManifestFile
from multinode.checkpoints.tree import SourceFile


@dataclass(frozen=True)
class KnownFile:
    path: Path        # the published file
    size: int
    probe: str | None


class DedupeIndex:
    def __init__(self) -> None:
        self._by_sha: dict[str, KnownFile] = {}
        self._hints: set[tuple[str, int, int]] = set()          # (relative path, size, source mtime_ns)
        self._probes: set[tuple[int, str]] = set()              # (size, probe)
        self._sizes_without_probe: set[int] = set()
        self._sizes: set[int] = set()

    def add(self, checkpoint_dir: Path, files: list[ManifestFile]) -> None:
        for f in files:
            if f.size == 0:
                continue
            self._by_sha.setdefault(f.sha256, KnownFile(checkpoint_dir / f.path, f.size, f.probe))
            self._sizes.add(f.size)
            if f.mtime_ns is not None:
                self._hints.add((f.path, f.size, f.mtime_ns))
            if f.probe is None:
                self._sizes_without_probe.add(f.size)
            else:
                self._probes.add((f.size, f.probe))

    def worth_hashing(self, src: SourceFile, probe_of: Callable[[SourceFile], str]) -> bool:
        """Whether `src` may already be published, so hashing it first (read only) may save its copy.

        Yes when an earlier manifest lists the same relative path, size and mtime; or a file of its size
        whose sampled blocks match. A same-size file with other content is then copied in one pass.
        """
        if src.size == 0 or src.size not in self._sizes:
            return False
        if (src.rel, src.size, src.mtime_ns) in self._hints or src.size in self._sizes_without_probe:
            return True
        return (src.size, probe_of(src)) in self._probes

    def find(self, sha256: str, size: int) -> KnownFile | None:
        known = self._by_sha.get(sha256)
        return known if known is not None and known.size == size else None

    def __len__(self) -> int:
        return len(self._by_sha)
