"""The ring all-reduce's pure parts: the schedule (run in memory across n nodes), the data and its checksum,
nccl-tests' bandwidth arithmetic and the blame rule."""

from __future__ import annotations

import zlib

import pytest

from multinode.preflight import collective
from multinode.preflight.collective import NodeLinks, Phase, chunk_bounds, node_links, ring_schedule, slow_nodes


def simulate_ring(inputs: list[bytes]) -> list[bytearray]:
    """Every node follows its own schedule; at each step what node r sends is what node r+1 receives."""
    n = len(inputs)
    buffers = [bytearray(data) for data in inputs]
    bounds = chunk_bounds(len(inputs[0]), n)
    schedules = [ring_schedule(rank, n) for rank in range(n)]
    for step in range(2 * (n - 1)):
        sent = {}
        for rank in range(n):
            start, end = bounds[schedules[rank][step].send_chunk]
            sent[collective.ring_next(rank, n)] = (schedules[rank][step].send_chunk, bytes(buffers[rank][start:end]))
        for rank in range(n):
            mine = schedules[rank][step]
            chunk, data = sent[rank]
            assert chunk == mine.recv_chunk, (rank, step)  # both ends agree on which chunk moves
            start, end = bounds[chunk]
            if mine.phase == Phase.REDUCE_SCATTER:
                buffers[rank][start:end] = collective.xor_bytes(buffers[rank][start:end], data)
            else:
                buffers[rank][start:end] = data
    return buffers


@pytest.mark.parametrize("n", [2, 3, 4, 7])
@pytest.mark.parametrize("size", [1000, 4099])
def test_the_schedule_all_reduces_on_every_node(n: int, size: int) -> None:
    inputs = [collective.rank_input("job-uid-a0", rank, size) for rank in range(n)]
    expected = bytes(size)
    for data in inputs:
        expected = collective.xor_bytes(expected, data)

    results = simulate_ring(inputs)

    assert all(bytes(result) == expected for result in results)
    checksums = [collective.checksum(data) for data in inputs]
    assert collective.expected_checksum(checksums, size) == zlib.crc32(expected)


def test_a_schedule_has_two_n_minus_one_steps_half_of_each_phase() -> None:
    steps = ring_schedule(1, 4)
    assert [s.phase for s in steps] == [Phase.REDUCE_SCATTER] * 3 + [Phase.ALL_GATHER] * 3
    # Reduce-scatter leaves node 1 with chunk 2 complete; the all-gather starts by sending it.
    assert (steps[2].recv_chunk, steps[3].send_chunk) == (2, 2)
    assert ring_schedule(0, 1) == []


def test_chunks_cover_the_buffer_and_differ_by_one_byte_at_most() -> None:
    assert chunk_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert chunk_bounds(2, 3) == [(0, 1), (1, 2), (2, 2)]


def test_a_wrong_result_does_not_match_the_expected_checksum() -> None:
    inputs = [collective.rank_input("s", rank, 64) for rank in range(3)]
    good = simulate_ring(inputs)[0]
    expected = collective.expected_checksum([collective.checksum(d) for d in inputs], 64)
    twice = collective.xor_bytes(good, inputs[1])  # node 1's part reduced twice
    swapped = good[32:] + good[:32]
    assert collective.checksum(good) == expected
    assert collective.checksum(twice) != expected and collective.checksum(swapped) != expected


def test_inputs_differ_by_node_and_by_attempt() -> None:
    assert collective.rank_input("a0", 0, 32) != collective.rank_input("a0", 1, 32)
    assert collective.rank_input("a0", 0, 32) != collective.rank_input("a1", 0, 32)
    assert collective.rank_input("a0", 0, 32) == collective.rank_input("a0", 0, 32)


def test_bandwidth_as_nccl_tests_define_it_in_gbit() -> None:
    algbw = collective.gbps(1e9, 2.0)  # 1 GB in 2 s: 0.5 GB/s, 4 Gbit/s
    assert algbw == pytest.approx(4.0)
    assert collective.busbw(algbw, 2) == pytest.approx(4.0)  # 2(n-1)/n = 1
    assert collective.busbw(algbw, 4) == pytest.approx(6.0)  # 1.5
    assert collective.busbw(algbw, 1000) == pytest.approx(4.0 * 1998 / 1000)


def test_a_node_s_outbound_link_is_the_next_node_s_inbound_one() -> None:
    assert node_links([1.0, 2.0, 3.0]) == [NodeLinks(0, 1.0, 2.0), NodeLinks(1, 2.0, 3.0), NodeLinks(2, 3.0, 1.0)]


def test_only_the_node_with_both_links_slow_is_blamed() -> None:
    # Node 1 is slow: the link into it (0->1) and out of it (1->2) crawl; 2->3 and 3->0 are fine.
    links = node_links([40.0, 0.01, 0.01, 38.0])
    assert slow_nodes(links, min_gbps=1.0) == [1]
    # Its neighbours each saw one slow link and are not blamed.
    assert (links[0].outbound_gbps, links[2].inbound_gbps) == (0.01, 0.01)


def test_every_link_fast_blames_nobody_and_two_slow_nodes_are_both_found() -> None:
    assert slow_nodes(node_links([10.0, 10.0, 10.0]), 5.0) == []
    assert slow_nodes(node_links([0.1, 0.1, 10.0, 0.1, 0.1, 10.0]), 5.0) == [0, 3]


def test_with_two_nodes_one_slow_pair_blames_both() -> None:
    # Both links join the same two nodes: the ring cannot tell which end is slow.
    assert slow_nodes(node_links([0.01, 0.01]), 1.0) == [0, 1]


def test_links_are_described_with_their_neighbours() -> None:
    links = node_links([40.0, 0.0098, 0.0123])
    assert collective.describe_links(links, 1) == "link from node 0 0.0098 Gbit/s, link to node 2 0.0123 Gbit/s"
