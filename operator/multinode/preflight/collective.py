"""The ring all-reduce of the collective bandwidth test (spec.healthCheck.collectiveBandwidth): its schedule,
its data, the arithmetic of its result and the blame rule. Pure: the sockets are in collective_net.py.

The ring is NCCL's: node r sends to r+1 and receives from r-1 (mod n). The buffer is cut into n chunks. In
reduce-scatter step s (n-1 of them) node r sends chunk r-s and receives chunk r-s-1, which it reduces into its
own; afterwards it holds chunk r+1 reduced over every node. In all-gather step s (n-1 more) it sends chunk
r+1-s, the last one it completed, and receives chunk r-s. Each link carries 2(n-1)/n of the buffer, which is
why nccl-tests report busbw = algbw * 2(n-1)/n: a figure comparable to a link's rate whatever n is.

The reduction is XOR over bytes: associative and commutative like a sum, and fast in the stdlib (one big
integer per chunk). Every node's input is random bytes of its own; the result is checked by its CRC-32,
which XOR lets any node compute from the inputs' CRC-32s (expected_checksum).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

class Phase(StrEnum):
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"


@dataclass(frozen=True)
class Step:
    phase: Phase
    send_chunk: int
    recv_chunk: int


def ring_next(rank: int, n: int) -> int:
    return (rank + 1) % n


def ring_prev(rank: int, n: int) -> int:
    return (rank - 1) % n


def chunk_bounds(size: int, n: int) -> list[tuple[int, int]]:
    """[start, end) of each of the n chunks of a `size`-byte buffer; lengths differ by at most one."""
    base, extra = divmod(size, n)
    bounds, start = [], 0
    for index in range(n):
        end = start + base + (1 if index < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def ring_schedule(rank: int, n: int) -> list[Step]:
    """The 2(n-1) steps of node `rank`: which chunk it sends to the next node and receives from the previous."""
    steps = [Step(Phase.REDUCE_SCATTER, (rank - s) % n, (rank - s - 1) % n) for s in range(n - 1)]
    steps += [Step(Phase.ALL_GATHER, (rank + 1 - s) % n, (rank - s) % n) for s in range(n - 1)]
    return steps


def xor_bytes(a: bytes | bytearray | memoryview, b: bytes | bytearray | memoryview) -> bytes:
    if len(a) != len(b):
        raise ValueError(f"cannot reduce {len(a)} bytes with {len(b)}")
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(len(a), "little")


def rank_input(seed: str, rank: int, size: int) -> bytes:
    # Random and different on every node, so a chunk put at the wrong offset, reduced twice or skipped, or a
    # byte flipped, changes the result's checksum.
    return random.Random(f"{seed}/{rank}").randbytes(size)


def checksum(data: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(data)


def expected_checksum(input_checksums: Sequence[int], size: int) -> int:
    """The CRC-32 of the XOR of n equal-length buffers, from their own CRC-32s.

    CRC-32 is affine over XOR: crc(a ^ b) = crc(a) ^ crc(b) ^ crc(zeros), so the XOR of the inputs' CRCs is
    right up to one crc(zeros) per pair. Each node computes its input's CRC itself, and the CRCs travel
    around the ring apart from the data, so a wrong reduction cannot vouch for itself."""
    combined = 0
    for value in input_checksums:
        combined ^= value
    if len(input_checksums) % 2 == 0:
        combined ^= zlib.crc32(bytes(size))
    return combined


def gbps(size_bytes: float, seconds: float) -> float:
    """Gbit/s; nccl-tests print GB/s (bytes), 8 times less."""
    return size_bytes * 8 / max(seconds, 1e-9) / 1e9


def busbw(algbw: float, n: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw * 2(n-1)/n."""
    return algbw * 2 * (n - 1) / n


@dataclass(frozen=True)
class NodeLinks:
    rank: int
    inbound_gbps: float  # the link from ring_prev(rank) into rank
    outbound_gbps: float  # the link from rank to ring_next(rank)


def node_links(inbound: Sequence[float]) -> list[NodeLinks]:
    """Each node's two ring links, from what each node measured coming in: node r's outbound link is node
    r+1's inbound one."""
    n = len(inbound)
    return [NodeLinks(r, inbound[r], inbound[ring_next(r, n)]) for r in range(n)]


def slow_nodes(links: Sequence[NodeLinks], min_gbps: float) -> list[int]:
    """The blame rule: a node whose inbound and outbound links are both below the floor is the slow one. Its
    neighbours each see one slow link (the one they share with it) and are not blamed. With two nodes both
    links join the same pair, so a slow one blames both: the ring cannot tell which end is at fault."""
    return [node.rank for node in links if node.inbound_gbps < min_gbps and node.outbound_gbps < min_gbps]


def format_gbps(value: float) -> str:
    return f"{value:.3g}"


def describe_links(links: Sequence[NodeLinks], rank: int) -> str:
    node = links[rank]
    n = len(links)
    return (f"link from node {ring_prev(rank, n)} {format_gbps(node.inbound_gbps)} Gbit/s, "
            f"link to node {ring_next(rank, n)} {format_gbps(node.outbound_gbps)} Gbit/s")
