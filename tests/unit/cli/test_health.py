"""The node health checks (cli/health.py) as pure functions of the facts, and `gather` on this machine."""

from __future__ import annotations

import argparse
import resource

import pytest

from multinode.api.health import HealthReason, HealthStatus
from multinode.cli import health
from multinode.cli.health import HealthRequest, NodeFacts, evaluate, quantity_bytes

GIB = 2**30


@pytest.mark.parametrize(("text", "expected"), [("16Mi", 16 * 2**20), ("1G", 10**9), ("1e3", 1000), ("1.5Ki", 1536),
                                                ("500m", 1), ("64", 64)])
def test_quantities_in_bytes(text: str, expected: int) -> None:
    assert quantity_bytes(text) == expected


def test_a_nonsense_quantity_is_refused() -> None:
    with pytest.raises(ValueError):
        quantity_bytes("lots")


def test_the_plugins_env_with_every_allocated_gpu_passes() -> None:
    verdict = evaluate(HealthRequest(gpus=2), NodeFacts(env={"NVIDIA_VISIBLE_DEVICES": "fake-1,fake-2"}))
    assert verdict == health.HealthVerdict(HealthStatus.PASSED, HealthReason.HEALTHY, "2 GPUs visible")


def test_fewer_ids_than_requested_fail_naming_what_was_seen() -> None:
    verdict = evaluate(HealthRequest(gpus=4), NodeFacts(env={"NVIDIA_VISIBLE_DEVICES": "gpu-0,gpu-1"}))
    assert (verdict.status, verdict.reason) == (HealthStatus.FAILED, HealthReason.GPUS_NOT_VISIBLE)
    assert verdict.message == "4 GPUs requested, fewer visible: 2 in NVIDIA_VISIBLE_DEVICES=gpu-0,gpu-1"


def test_no_source_of_gpus_at_all_fails() -> None:
    verdict = evaluate(HealthRequest(gpus=1), NodeFacts(env={}))
    assert verdict.reason == HealthReason.GPUS_NOT_VISIBLE and "none visible" in verdict.message


@pytest.mark.parametrize("value", ["none", "void", ""])
def test_an_env_that_names_no_device_counts_zero(value: str) -> None:
    facts = NodeFacts(env={"NVIDIA_VISIBLE_DEVICES": value})
    assert evaluate(HealthRequest(gpus=1), facts).status == HealthStatus.FAILED


def test_on_a_real_gpu_node_the_device_nodes_and_nvidia_smi_must_agree() -> None:
    # "all" says nothing about the count: the devices and nvidia-smi decide.
    facts = NodeFacts(env={"NVIDIA_VISIBLE_DEVICES": "all"}, nvidia_ctl=True, nvidia_devices=8, nvidia_smi_gpus=7)
    verdict = evaluate(HealthRequest(gpus=8), facts)
    assert verdict.status == HealthStatus.FAILED and verdict.message.endswith("7 in nvidia-smi -L")
    healthy = NodeFacts(env={"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}, nvidia_ctl=True, nvidia_devices=2,
                        nvidia_smi_gpus=2)
    assert evaluate(HealthRequest(gpus=2), healthy).status == HealthStatus.PASSED


def test_device_nodes_without_nvidiactl_are_not_a_driver() -> None:
    # /dev/nvidia0 alone (no control device) is not counted as a source.
    assert evaluate(HealthRequest(gpus=1), NodeFacts(nvidia_devices=1)).status == HealthStatus.FAILED


def test_rdma_devices_from_uverbs_or_the_plugins_env() -> None:
    request = HealthRequest(rdma=1, rdma_env="PCIDEVICE_NVIDIA_COM_MLNXNICS", memlock_floor=GIB)
    assert evaluate(request, NodeFacts(uverbs_devices=2)).status == HealthStatus.PASSED
    facts = NodeFacts(env={"PCIDEVICE_NVIDIA_COM_MLNXNICS": "0000:3b:00.2"})
    assert evaluate(request, facts).status == HealthStatus.PASSED
    missing = evaluate(request, NodeFacts())
    assert missing.reason == HealthReason.RDMA_DEVICES_MISSING
    assert missing.message == ("1 RDMA devices requested, found 0 /dev/infiniband/uverbs* devices "
                               "and 0 IDs in PCIDEVICE_NVIDIA_COM_MLNXNICS")


@pytest.mark.parametrize(("memlock", "cap", "passed"), [(health.UNLIMITED, False, True), (2 * GIB, False, True),
                                                        (64 * 2**10, True, True), (64 * 2**10, False, False)])
def test_memlock_unlimited_above_the_floor_or_lifted_by_ipc_lock(memlock: int, cap: bool, passed: bool) -> None:
    verdict = evaluate(HealthRequest(rdma=1, memlock_floor=GIB), NodeFacts(uverbs_devices=1, memlock=memlock,
                                                                           cap_ipc_lock=cap))
    assert (verdict.status == HealthStatus.PASSED) is passed
    if not passed:
        assert verdict.reason == HealthReason.MEMLOCK_TOO_LOW and "65536 bytes" in verdict.message


def test_shm_must_hold_shm_size() -> None:
    request = HealthRequest(shm_bytes=2 * GIB)
    assert evaluate(request, NodeFacts(shm_bytes=2 * GIB)).status == HealthStatus.PASSED
    small = evaluate(request, NodeFacts(shm_bytes=64 * 2**20))
    assert small.reason == HealthReason.SHM_TOO_SMALL
    assert small.message == f"/dev/shm holds {64 * 2**20} bytes, shmSize asks for {2 * GIB}"
    assert evaluate(request, NodeFacts(shm_bytes=None)).reason == HealthReason.SHM_TOO_SMALL


def test_the_first_failure_decides_in_a_fixed_order() -> None:
    verdict = evaluate(HealthRequest(gpus=1, shm_bytes=GIB), NodeFacts(shm_bytes=0))
    assert verdict.reason == HealthReason.GPUS_NOT_VISIBLE


def test_gather_reads_this_machine(tmp_path) -> None:
    (tmp_path / "shm").mkdir()
    (tmp_path / "infiniband").mkdir()
    for name in ("uverbs0", "uverbs1", "rdma_cm"):
        (tmp_path / "infiniband" / name).touch()
    for name in ("nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm"):
        (tmp_path / name).touch()
    facts = health.gather(HealthRequest(shm_bytes=1), dev=tmp_path)
    assert (facts.uverbs_devices, facts.nvidia_ctl, facts.nvidia_devices) == (2, True, 2)
    assert facts.shm_bytes is not None and facts.shm_bytes > 0
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert facts.memlock == (health.UNLIMITED if soft == resource.RLIM_INFINITY else soft)


def test_arguments_make_the_request() -> None:
    parser = argparse.ArgumentParser()
    health.add_arguments(parser)
    args = parser.parse_args(["--check-gpus", "8", "--check-rdma", "1", "--rdma-env", "X", "--memlock-floor", "5",
                              "--check-shm", "1Gi"])
    assert health.request_from_args(args) == HealthRequest(gpus=8, rdma=1, rdma_env="X", memlock_floor=5,
                                                           shm_bytes=GIB)
    assert health.request_from_args(parser.parse_args([])).empty
