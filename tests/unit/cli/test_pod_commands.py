"""The arguments of the commands the job's pods run, as render/ writes them, made into the programs' requests."""

from __future__ import annotations

import pytest

from multinode.cli.main import build_parser
from multinode.cli.pod_commands import collective_request, preflight_request
from multinode.preflight.bandwidth import MIB, BandwidthRequest
from multinode.preflight.node_checks import HealthRequest
from multinode.preflight.program import PreflightRequest

GIB = 2**30


def parse(*argv: str):
    return build_parser().parse_args(["preflight", *argv])


def test_the_preflight_arguments_make_its_request() -> None:
    args = parse("--timeout", "30", "--interval", "0.5", "--peers", "a,b", "--make-dir", "/cache/x",
                 "--make-dir-mode", "777", "--check-gpus", "8", "--check-rdma", "1", "--rdma-env", "X",
                 "--memlock-floor", "5", "--check-shm", "1Gi")
    assert preflight_request(args) == PreflightRequest(
        timeout=30, interval=0.5, peers=["a", "b"], make_dirs=["/cache/x"], make_dir_mode=0o777,
        health=HealthRequest(gpus=8, rdma=1, rdma_env="X", memlock_floor=5, shm_bytes=GIB), collective=None)


def test_without_arguments_the_preflight_checks_nothing_and_waits_for_the_env_contracts_peers() -> None:
    request = preflight_request(parse())
    assert request.health.empty and request.peers is None and request.collective is None


def test_a_shm_size_that_is_no_quantity_is_an_argument_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse("--check-shm", "lots")
    assert exited.value.code == 2
    assert "argument --check-shm: not a Kubernetes quantity: 'lots'" in capsys.readouterr().err


def test_the_collective_test_takes_the_attempts_port_and_id_from_the_env_contract() -> None:
    args = parse("--collective-min-gbps", "5", "--collective-size-mib", "8", "--node-index", "2")
    assert collective_request(args, {"MASTER_PORT": "29501", "MULTINODE_RDZV_ID": "uid-a3"}) == BandwidthRequest(
        min_gbps=5, size_bytes=8 * MIB, timeout=60.0, rank=2, port=29501, ring_id="uid-a3")


def test_the_collective_test_refuses_to_run_without_its_port_or_its_rank() -> None:
    with pytest.raises(SystemExit, match="needs the attempt's port and id"):
        collective_request(parse("--collective-min-gbps", "1", "--node-index", "0"), {})
    with pytest.raises(SystemExit, match="needs --node-index"):
        collective_request(parse("--collective-min-gbps", "1", "--collective-port", "1", "--collective-id", "x"), {})
