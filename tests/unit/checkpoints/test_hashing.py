"""The probe gathered from a copy's chunks is the probe of the file read back, at every size and chunking."""

from __future__ import annotations

from pathlib import Path

import pytest

from multinode.checkpoints.hashing import PROBE_BLOCK, SHA256, XXH3_128, ProbeCollector, digest_of, probe
from tests.unit.checkpoints import checkpoint_factory as make


@pytest.mark.parametrize("size", [0, 1, PROBE_BLOCK - 1, PROBE_BLOCK, PROBE_BLOCK + 1, 100_000, 2 * PROBE_BLOCK + 7,
                                  3 * PROBE_BLOCK, (1 << 20) + 3])
@pytest.mark.parametrize("chunk", [4096, 65_537, 8 << 20])
def test_the_probe_of_the_chunks_is_the_probe_of_the_file(tmp_path: Path, size: int, chunk: int) -> None:
    data = make.random_bytes(size, seed=size)
    path = make.write(tmp_path / "f", data)
    collector = ProbeCollector(size)
    for offset in range(0, size, chunk):
        collector.feed(offset, memoryview(data)[offset:offset + chunk])

    for algorithm in (XXH3_128, SHA256):
        assert collector.digest(algorithm) == probe(path, size, algorithm)
    assert probe(path, size, XXH3_128) != probe(path, size, SHA256)


def test_a_changed_byte_outside_the_sampled_blocks_changes_the_digest_only(tmp_path: Path) -> None:
    size = 4 * PROBE_BLOCK
    data = bytearray(make.random_bytes(size, seed=1))
    a = make.write(tmp_path / "a", bytes(data))
    data[PROBE_BLOCK + 5] ^= 1   # between the start block and the middle one
    b = make.write(tmp_path / "b", bytes(data))

    assert probe(a, size) == probe(b, size)
    assert digest_of(a, XXH3_128) != digest_of(b, XXH3_128)
