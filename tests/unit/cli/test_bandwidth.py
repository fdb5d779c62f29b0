"""The collective bandwidth test over real TCP sockets: nodes are threads (and, once, `multinode preflight`
processes) on loopback addresses 127.0.0.1, .2, .3, each listening on the same port as pods do."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from multinode.api.health import BandwidthFigures, HealthReason, HealthStatus, parse_health_message
from multinode.cli import bandwidth
from multinode.cli.bandwidth import BandwidthOutcome, BandwidthRequest
from multinode.cli.collective import node_links
from multinode.cli.collective_net import MAGIC, _RANK
from multinode.cli.health import HealthVerdict
from multinode.cli.preflight import check_bandwidth

MIB = 2**20


def addresses(n: int) -> list[str]:
    return [f"127.0.0.{rank + 1}" for rank in range(n)]


@pytest.fixture
def port() -> int:
    """A port free on the loopback addresses the nodes listen on."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            candidate = probe.getsockname()[1]
        try:
            for address in addresses(3):
                socket.create_server((address, candidate)).close()
            return candidate
        except OSError:
            continue


def request(rank: int, port: int, *, min_gbps: float = 0.001, size_mib: float = 2, timeout: float = 30,
            ring_id: str = "uid-a0") -> BandwidthRequest:
    return BandwidthRequest(min_gbps=min_gbps, size_bytes=int(size_mib * MIB), timeout=timeout, rank=rank,
                            port=port, ring_id=ring_id, bind_host=addresses(3)[rank])


def run_ring(ranks: list[int], n: int, port: int, **kwargs) -> dict[int, object]:
    names = addresses(n)
    with ThreadPoolExecutor(len(ranks)) as pool:
        futures = {rank: pool.submit(bandwidth.check, request(rank, port, **kwargs), names) for rank in ranks}
        return {rank: future.result(timeout=120) for rank, future in futures.items()}


def test_three_nodes_all_reduce_and_report_nccl_tests_figures(port: int) -> None:
    results = run_ring([0, 1, 2], 3, port)

    for result in results.values():
        assert not isinstance(result, str), result
        verdict, figures = result
        assert (verdict.status, verdict.reason) == (HealthStatus.PASSED, HealthReason.HEALTHY), verdict
        assert "2 MiB ring all-reduce over 3 nodes, checksum ok" in verdict.message
        assert figures is not None and figures.algbw_gbps and figures.busbw_gbps
        assert figures.busbw_gbps == pytest.approx(figures.algbw_gbps * 4 / 3, rel=1e-3)
        assert figures.inbound_gbps > 0 and figures.outbound_gbps > 0
    # Node 0's outbound link is node 1's inbound one: both ends report the one figure.
    assert results[0][1].outbound_gbps == results[1][1].inbound_gbps  # type: ignore[index]


def test_two_nodes_form_a_ring_of_two_connections(port: int) -> None:
    results = run_ring([0, 1], 2, port)
    assert all(not isinstance(r, str) and r[0].status == HealthStatus.PASSED for r in results.values()), results


def test_a_peer_that_never_connects_fails_every_node_in_time_naming_it(port: int) -> None:
    started = time.monotonic()
    results = run_ring([0, 1], 3, port, timeout=3)  # node 2 never starts

    assert time.monotonic() - started < 10
    assert results[0] == (f"CollectivePeerUnreachable: node 2 (127.0.0.3) never connected to this node's port {port} "
                          "in the test's time (timeoutSeconds 3)")
    assert isinstance(results[1], str)
    assert results[1].startswith(f"CollectivePeerUnreachable: could not connect to node 2 (127.0.0.3:{port}) "
                                 "in the test's time: ")


def test_a_pod_of_another_attempt_is_turned_away_and_the_ring_still_forms(port: int) -> None:
    names = addresses(3)
    with ThreadPoolExecutor(3) as pool:
        node0 = pool.submit(bandwidth.check, request(0, port), names)
        # A stale node 2 of attempt 4 (same port: 4 mod 4 == 0) knocks on node 0's port first.
        stale_id = b"uid-a4"
        deadline = time.monotonic() + 10
        while True:
            try:
                stale = socket.create_connection((names[0], port), timeout=1)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
                time.sleep(0.05)  # node 0's listener is not up yet
        with stale:
            stale.sendall(MAGIC + _RANK.pack(len(stale_id)) + stale_id + _RANK.pack(2))
            stale.settimeout(5)
            assert stale.recv(2) == b""  # closed without the OK
        others = [pool.submit(bandwidth.check, request(rank, port), names) for rank in (1, 2)]
        results = [node0.result(timeout=60), *(f.result(timeout=60) for f in others)]
    assert all(not isinstance(r, str) and r[0].status == HealthStatus.PASSED for r in results), results


def outcome(inbound: list[float], slow: list[int], algbw: float | None = None, checksums: tuple = (None, None)):
    return BandwidthOutcome(node_links(inbound), slow, algbw, *checksums)


def test_the_slow_node_fails_with_both_links_in_its_message() -> None:
    verdict, figures = bandwidth.judge(request(1, 1, min_gbps=5), outcome([20.0, 0.0098, 0.0099], [1]))
    assert verdict == HealthVerdict(HealthStatus.FAILED, HealthReason.COLLECTIVE_BANDWIDTH_LOW,
                              "both ring links of node 1 are below minGbps 5: link from node 0 0.0098 Gbit/s, "
                              "link to node 2 0.0099 Gbit/s")
    assert figures == BandwidthFigures(inbound_gbps=0.0098, outbound_gbps=0.0099)


def test_its_neighbours_pass_and_name_it() -> None:
    verdict, figures = bandwidth.judge(request(0, 1, min_gbps=5), outcome([20.0, 0.0098, 0.0099], [1]))
    assert verdict.status == HealthStatus.PASSED
    assert verdict.message == ("collective bandwidth: this node's link from node 2 20 Gbit/s, link to node 1 "
                               "0.0098 Gbit/s; all-reduce skipped, slow: node 1: link from node 0 0.0098 Gbit/s, "
                               "link to node 2 0.0099 Gbit/s")
    assert figures.busbw_gbps is None


def test_a_wrong_checksum_fails_the_node() -> None:
    verdict, _ = bandwidth.judge(request(0, 1), outcome([9.0, 9.0], [], 4.0, (0xDEAD, 0xBEEF)))
    assert (verdict.status, verdict.reason) == (HealthStatus.FAILED, HealthReason.COLLECTIVE_RESULT_WRONG)
    assert verdict.message == "ring all-reduce of 2 MiB over 2 nodes gave CRC-32 0000dead, expected 0000beef"


def test_one_node_has_no_ring_to_test() -> None:
    verdict, figures = bandwidth.check(request(0, 1), ["only-node"])  # type: ignore[misc]
    assert verdict.status == HealthStatus.PASSED and figures is None


def test_the_termination_message_carries_the_figures_to_the_operator(port: int) -> None:
    names = addresses(2)
    local = HealthVerdict(HealthStatus.PASSED, HealthReason.HEALTHY, "8 GPUs visible")
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(check_bandwidth, request(rank, port), names, local) for rank in (0, 1)]
        (passed, message), _ = [f.result(timeout=60) for f in futures]
    health = parse_health_message(message)
    assert passed and health is not None and health.bandwidth is not None, message
    assert health.message is not None and health.message.startswith("8 GPUs visible; collective bandwidth: busbw ")
    assert health.bandwidth.busbw_gbps == health.bandwidth.algbw_gbps  # 2 nodes: 2(n-1)/n = 1


def test_the_preflight_command_runs_the_test_after_the_peers_resolve(port: int) -> None:
    names = ",".join(addresses(2))
    procs = [subprocess.Popen([sys.executable, "-m", "multinode.cli.main", "preflight", "--peers", names,
                               "--timeout", "10", "--collective-min-gbps", "0.001", "--collective-size-mib", "1",
                               "--collective-timeout", "30", "--node-index", str(rank), "--collective-port", str(port),
                               "--collective-id", "uid-a0", "--collective-bind", addresses(2)[rank]],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outputs = [proc.communicate(timeout=60)[0] for proc in procs]
    for proc, out in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out
        assert "all 2 peers resolve" in out and "node health check passed: collective bandwidth: busbw " in out


def test_the_preflight_refuses_a_test_without_its_rank() -> None:
    proc = subprocess.run([sys.executable, "-m", "multinode.cli.main", "preflight", "--peers", "127.0.0.1",
                           "--collective-min-gbps", "1", "--collective-port", "1", "--collective-id", "x"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode != 0 and "the collective test needs --node-index" in proc.stderr
