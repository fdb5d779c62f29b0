"""The content hashes of published files, and the probe (a digest of sampled blocks) used as a dedupe hint.

New manifests use XXH3-128 (`xxhash`): the hash guards against corruption and finds files already
published *within one job's destination*, not against an adversary; at 128 bits an accidental collision
is out of reach (about n^2 / 2^129 for n files), and it runs at tens of GB/s, where sha256 (about 1.7
GB/s on one core) was the mirror's largest CPU cost. Manifests of format 1 name no hash and mean sha256;
they still verify and still dedupe (a file is then hashed with both, in the same read).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import xxhash

SHA256 = "sha256"
XXH3_128 = "xxh3_128"
DEFAULT_HASH = XXH3_128


class Hasher(Protocol):
    """What the mirror needs of a hash object (hashlib's and xxhash's both are)."""

    def update(self, data: bytes | bytearray | memoryview, /) -> None: ...

    def hexdigest(self) -> str: ...


HASHES: dict[str, Callable[[], Hasher]] = {SHA256: hashlib.sha256, XXH3_128: xxhash.xxh3_128}
DIGEST_LENGTH = {SHA256: 64, XXH3_128: 32}   # hex characters
HASH_BUFFER = 8 << 20
PROBE_BLOCK = 64 << 10


def new_hash(algorithm: str) -> Hasher:
    return HASHES[algorithm]()


def probe_offsets(size: int) -> list[int]:
    """Where the probe samples: the start, the middle and the end (each PROBE_BLOCK long, clipped)."""
    return sorted({0, max(0, size // 2 - PROBE_BLOCK // 2), max(0, size - PROBE_BLOCK)})


class ProbeCollector:
    """Gathers the probe's blocks from the chunks of a sequential read, so a copy computes the probe
    without reading the file again."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.blocks = [(offset, bytearray()) for offset in probe_offsets(size)]

    def feed(self, offset: int, chunk: memoryview) -> None:
        end = offset + len(chunk)
        for start, block in self.blocks:
            stop = min(start + PROBE_BLOCK, self.size)
            if start < end and offset < stop:
                block.extend(chunk[max(start, offset) - offset:min(stop, end) - offset])

    def digest(self, algorithm: str = DEFAULT_HASH) -> str:
        return probe_digest(self.size, [block for _, block in self.blocks], algorithm)


def probe_digest(size: int, blocks: list[bytes] | list[bytearray], algorithm: str) -> str:
    h = new_hash(algorithm)
    h.update(str(size).encode())
    for block in blocks:
        h.update(block)
    return h.hexdigest()


def probe_open(fd: int, size: int, algorithm: str = DEFAULT_HASH) -> str:
    """A cheap fingerprint of the file open as `fd`: the hash of the size and three sampled blocks (start,
    middle, end).

    Equal probes make a full hash worth its read; unequal ones prove the files differ. So a changed
    shard of the same size as a published one is read once (copied), not twice (hashed, then copied).
    """
    return probe_digest(size, [os.pread(fd, PROBE_BLOCK, offset) for offset in probe_offsets(size)], algorithm)


def probe(path: Path, size: int, algorithm: str = DEFAULT_HASH) -> str:
    """probe_open of a file the mirror wrote itself (the cache's files are opened by copying.py)."""
    with open(path, "rb", buffering=0) as f:
        return probe_open(f.fileno(), size, algorithm)


def digest_of(path: Path, algorithm: str) -> str:
    h = new_hash(algorithm)
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(max(1, min(HASH_BUFFER, os.fstat(f.fileno()).st_size + 1)))
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
