"""spec.healthCheck on the node pod: the preflight's checks and devices."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from multinode.testing import stored_job
from multinode.api import TrainingJob
from multinode.render import render_node_pod
from multinode.testing import preflight


def test_the_checks_follow_the_request() -> None:
    job = stored_job(2, resourcesPerNode={"gpus": 8}, network={"rdma": {"count": 2}}, shmSize="16Gi",
                     healthCheck={"rdmaDeviceEnv": "PCIDEVICE_NVIDIA_COM_MLNXNICS"})
    container = preflight(render_node_pod(job, 0, 0))

    assert container["args"] == ["--timeout", "300", "--check-gpus", "8", "--check-rdma", "2",
                                 "--memlock-floor", str(64 * 2**30), "--rdma-env", "PCIDEVICE_NVIDIA_COM_MLNXNICS",
                                 "--check-shm", "16Gi"]
    # The trainer's devices, so the check sees them (the kubelet hands them on to the trainer).
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "128Mi", "nvidia.com/gpu": "8",
                                                "rdma/hca_shared_devices_a": "2"}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert container["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]


def test_a_cpu_job_without_shm_size_checks_nothing() -> None:
    container = preflight(render_node_pod(stored_job(2), 0, 0))
    assert container["args"] == ["--timeout", "300"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "128Mi"}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]} and "volumeMounts" not in container


@pytest.mark.parametrize(("health_check", "args"), [
    ({"enabled": False}, ["--timeout", "300"]),
    ({"gpus": False}, ["--timeout", "300", "--check-shm", "1Gi"]),
    ({"shm": False}, ["--timeout", "300", "--check-gpus", "4"]),
])
def test_checks_turned_off(health_check: dict[str, Any], args: list[str]) -> None:
    job = stored_job(2, resourcesPerNode={"gpus": 4}, shmSize="1Gi", healthCheck=health_check)
    container = preflight(render_node_pod(job, 0, 0))
    assert container["args"] == args
    assert ("nvidia.com/gpu" in container["resources"]["limits"]) is ("--check-gpus" in args)


@pytest.mark.parametrize("health_check", [{"exclusionSeconds": 10}, {"exclusionSeconds": 10**9},
                                          {"memlockFloorBytes": -1}, {"rdmaDeviceEnv": "A B"}])
def test_bad_health_check_fields_are_refused_by_field(health_check: dict[str, Any]) -> None:
    body = stored_job(2).model_dump(by_alias=True, exclude_none=True)
    body["spec"]["healthCheck"] = health_check
    with pytest.raises(ValidationError) as error:
        TrainingJob.model_validate(body)
    assert "healthCheck" in str(error.value)


def test_the_collective_bandwidth_test_gets_its_rank_a_core_and_room_for_its_buffer() -> None:
    job = stored_job(3, healthCheck={"collectiveBandwidth": {"minGbps": 2.5, "sizeMiB": 16, "timeoutSeconds": 30}})
    for index in range(3):
        container = preflight(render_node_pod(job, index, 1))
        assert container["args"] == ["--timeout", "300", "--collective-min-gbps", "2.5", "--collective-size-mib",
                                     "16", "--collective-timeout", "30", "--node-index", str(index)]
        # 128Mi as usual plus 4 x 16 MiB; two cores: it must measure the links, not its CPU quota.
        assert container["resources"]["limits"] == {"cpu": "2", "memory": "192Mi"}
        assert container["resources"]["requests"] == {"cpu": "50m", "memory": "64Mi"}


def test_the_collective_test_is_off_with_the_health_check() -> None:
    job = stored_job(3, healthCheck={"enabled": False, "collectiveBandwidth": {"minGbps": 2.5}})
    container = preflight(render_node_pod(job, 0, 0))
    assert container["args"] == ["--timeout", "300"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "128Mi"}
