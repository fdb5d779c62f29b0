"""The collective bandwidth test of `multinode preflight` (spec.healthCheck.collectiveBandwidth).

Once every peer's name resolves, the preflights of an attempt form a TCP ring and:

1. measure each ring link alone: every node streams the buffer's size to the next one at once, and times what
   arrives from the previous one;
2. share those rates around the ring, so every node knows every link and applies the blame rule
   (collective.slow_nodes) to the same figures: a node with both links below minGbps fails with
   CollectiveBandwidthLow, its neighbours pass, and nobody runs the all-reduce over a link known to crawl;
3. otherwise run one small warm-up and one timed ring all-reduce of the buffer, check the result's checksum
   and report algbw and busbw as nccl-tests define them.

A peer that never connects, or breaks off, is not this node's fault: the preflight fails with a plain
`CollectivePeerUnreachable` message, which restarts the gang without excluding this node.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from multinode.api.constants import EnvName
from multinode.api.health import BandwidthFigures, HealthReason, HealthStatus
from multinode.cli import collective
from multinode.cli.collective import NodeLinks, describe_links, format_gbps
from multinode.cli.collective_net import (
    NodeRecord,
    PeerError,
    all_gather_records,
    all_reduce,
    measure_inbound,
    open_ring,
)
from multinode.cli.health import HealthVerdict

log = logging.getLogger("multinode.preflight")

PEER_UNREACHABLE = "CollectivePeerUnreachable"
MIB = 2**20
# Warm-up all-reduce: opens the TCP windows so the timed run measures the links, not slow start.
WARM_UP_BYTES = MIB
# Share of the test's time the link rates may take; the rest is for the all-reduce.
LINK_SHARE = 1 / 3


@dataclass(frozen=True)
class BandwidthRequest:
    min_gbps: float
    size_bytes: int
    timeout: float
    rank: int
    port: int
    ring_id: str
    bind_host: str = ""


@dataclass(frozen=True)
class BandwidthOutcome:
    links: list[NodeLinks]
    slow: list[int]
    algbw_gbps: float | None = None  # None: the all-reduce was skipped
    result_checksum: int | None = None
    expected_checksum: int | None = None


def run_test(request: BandwidthRequest, names: Sequence[str]) -> BandwidthOutcome:
    """Run this node's part of the test; raises PeerError when the ring cannot form or breaks."""
    deadline = time.monotonic() + request.timeout
    n, seed = len(names), request.ring_id
    # The data first, before any peer waits on this node.
    data = collective.rank_input(seed, request.rank, request.size_bytes)
    ring = open_ring(request.rank, names, request.port, request.ring_id, deadline, request.bind_host)
    try:
        log.info("collective ring formed: node %d of %d, port %d", request.rank, n, request.port)
        link_deadline = time.monotonic() + (deadline - time.monotonic()) * LINK_SHARE
        inbound = measure_inbound(ring, request.size_bytes, link_deadline)
        records = all_gather_records(ring, NodeRecord(inbound, collective.checksum(data)))
        links = collective.node_links([record.inbound_gbps for record in records])
        slow = collective.slow_nodes(links, request.min_gbps)
        if slow:
            return BandwidthOutcome(links, slow)
        all_reduce(ring, data[:WARM_UP_BYTES])
        started = time.monotonic()
        result = all_reduce(ring, data)
        algbw = collective.gbps(len(data), time.monotonic() - started)
        expected = collective.expected_checksum([record.input_checksum for record in records], len(data))
        return BandwidthOutcome(links, [], algbw, collective.checksum(result), expected)
    finally:
        ring.close()


def judge(request: BandwidthRequest, outcome: BandwidthOutcome) -> tuple[HealthVerdict, BandwidthFigures]:
    """This node's verdict and figures from what the ring found."""
    rank, n = request.rank, len(outcome.links)
    mine = outcome.links[rank]
    algbw = outcome.algbw_gbps
    figures = BandwidthFigures(inbound_gbps=round(mine.inbound_gbps, 4), outbound_gbps=round(mine.outbound_gbps, 4),
                               algbw_gbps=None if algbw is None else round(algbw, 4),
                               busbw_gbps=None if algbw is None else round(collective.busbw(algbw, n), 4))
    floor = format_gbps(request.min_gbps)
    links = describe_links(outcome.links, rank)
    if rank in outcome.slow:
        return HealthVerdict(HealthStatus.FAILED, HealthReason.COLLECTIVE_BANDWIDTH_LOW,
                       f"both ring links of node {rank} are below minGbps {floor}: {links}"), figures
    if outcome.slow:
        others = "; ".join(f"node {r}: {describe_links(outcome.links, r)}" for r in outcome.slow[:4])
        return HealthVerdict(HealthStatus.PASSED, HealthReason.HEALTHY,
                       f"collective bandwidth: this node's {links}; all-reduce skipped, slow: {others}"), figures
    assert algbw is not None
    size = f"{request.size_bytes / MIB:g} MiB"
    if outcome.result_checksum != outcome.expected_checksum:
        return HealthVerdict(HealthStatus.FAILED, HealthReason.COLLECTIVE_RESULT_WRONG,
                       f"ring all-reduce of {size} over {n} nodes gave CRC-32 {outcome.result_checksum:08x}, "
                       f"expected {outcome.expected_checksum:08x}"), figures
    return HealthVerdict(HealthStatus.PASSED, HealthReason.HEALTHY,
                   f"collective bandwidth: busbw {format_gbps(figures.busbw_gbps or 0)} Gbit/s (algbw "
                   f"{format_gbps(algbw)}, {size} ring all-reduce over {n} nodes, checksum ok); {links}"), figures


def check(request: BandwidthRequest, names: Sequence[str]) -> tuple[HealthVerdict, BandwidthFigures | None] | str:
    """The verdict and figures, or the plain failure message of a ring that could not run."""
    if len(names) < 2:
        return HealthVerdict(HealthStatus.PASSED, HealthReason.HEALTHY, "collective bandwidth: one node, no ring"), None
    try:
        outcome = run_test(request, names)
    except PeerError as e:
        return f"{PEER_UNREACHABLE}: {e} (timeoutSeconds {request.timeout:g})"
    except OSError as e:  # the listening port is taken: not a peer's fault, and not the link's
        return f"{PEER_UNREACHABLE}: cannot listen on port {request.port}: {e.strerror or e}"
    return judge(request, outcome)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("collective bandwidth test (spec.healthCheck.collectiveBandwidth)")
    group.add_argument("--collective-min-gbps", type=float, metavar="GBPS",
                       help="run the test; a node with both ring links below this fails")
    group.add_argument("--collective-size-mib", type=int, default=64, metavar="MIB")
    group.add_argument("--collective-timeout", type=float, default=60.0, metavar="SECONDS")
    group.add_argument("--node-index", type=int, metavar="N", help="this node's rank in the ring")
    group.add_argument("--collective-port", type=int, help="default: $MASTER_PORT, the attempt's port")
    group.add_argument("--collective-id", help="default: $MULTINODE_RDZV_ID, the attempt's id")
    group.add_argument("--collective-bind", default="", metavar="ADDRESS", help="address to listen on (all)")


def request_from_args(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> BandwidthRequest | None:
    if args.collective_min_gbps is None:
        return None
    try:
        port = args.collective_port or int(env[EnvName.MASTER_PORT])
        ring_id = args.collective_id or env[EnvName.MULTINODE_RDZV_ID]
    except (KeyError, ValueError) as e:
        raise SystemExit(f"preflight: the collective test needs the attempt's port and id ({e!r})") from None
    if args.node_index is None:
        raise SystemExit("preflight: the collective test needs --node-index")
    return BandwidthRequest(min_gbps=args.collective_min_gbps, size_bytes=args.collective_size_mib * MIB,
                            timeout=args.collective_timeout, rank=args.node_index, port=port, ring_id=ring_id,
                            bind_host=args.collective_bind)
