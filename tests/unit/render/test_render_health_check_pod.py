"""spec.healthCheck on the node pod: the preflight's checks and devices, and excluded nodes' affinity."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from multinode.testing import stored_job
from multinode.api import TrainingJob
from multinode.render import render_node_pod
from multinode.render.health_check_pod import exclude_nodes
from multinode.render.pod import one_pod_per_node
from multinode.testing import preflight


def test_the_checks_follow_the_request() -> None:
    job = stored_job(2, resourcesPerNode={"gpus": 8}, network={"rdma": {"count": 2}}, shmSize="16Gi",
                     healthCheck={"rdmaDeviceEnv": "PCIDEVICE_NVIDIA_COM_MLNXNICS"})
    container = preflight(render_node_pod(job, 0, 0))

    assert container["args"] == ["--timeout", "300", "--check-gpus", "8", "--check-rdma", "2",
                                 "--memlock-floor", str(64 * 2**30), "--rdma-env", "PCIDEVICE_NVIDIA_COM_MLNXNICS",
                                 "--check-shm", "16Gi"]
    # The trainer's devices, so the check sees them (the kubelet hands them on to the trainer).
    assert container["resources"]["limits"] == {"cpu": "100m", "memory": "128Mi", "nvidia.com/gpu": "8",
                                                "rdma/hca_shared_devices_a": "2"}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert container["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]


def test_a_cpu_job_without_shm_size_checks_nothing() -> None:
    container = preflight(render_node_pod(stored_job(2), 0, 0))
    assert container["args"] == ["--timeout", "300"]
    assert container["resources"]["limits"] == {"cpu": "100m", "memory": "128Mi"}
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


OTHER_TRAINERS = {"labelSelector": {"matchLabels": {"app": "other"}}, "topologyKey": "kubernetes.io/hostname"}


def test_excluded_nodes_without_a_user_affinity() -> None:
    pod = render_node_pod(stored_job(2), 0, 1, excluded_nodes=["gpu-9", "gpu-3"])
    one_each = [{"key": "metadata.name", "operator": "NotIn", "values": [node]} for node in ("gpu-3", "gpu-9")]
    assert pod["spec"]["affinity"]["nodeAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": one_each}]}}, \
        "one NotIn per node: the apiserver refuses more than one value in a node field selector's NotIn"


def test_excluded_nodes_join_every_term_of_the_users_affinity_and_leave_it_unchanged() -> None:
    user = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1", "gpu-9"]}]}]},
             "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]},
            "podAntiAffinity": {"x": 1, "requiredDuringSchedulingIgnoredDuringExecution": [OTHER_TRAINERS]}}
    job = stored_job(2, podTemplate={"affinity": user})
    before = job.model_dump()
    affinity = render_node_pod(job, 0, 1, excluded_nodes=["gpu-9"])["spec"]["affinity"]

    not_in = {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-9"]}
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    pool_a = [{"key": "pool", "operator": "In", "values": ["a"]}]
    assert terms == [{"matchExpressions": pool_a, "matchFields": [not_in]},
                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1", "gpu-9"]},
                                      not_in]}]
    # The user's pod anti-affinity keeps its own terms; one pod per node joins them.
    assert affinity["podAntiAffinity"] == {"x": 1, "requiredDuringSchedulingIgnoredDuringExecution": [
        OTHER_TRAINERS, one_pod_per_node("llama", 1)]}
    assert affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 1,
                                                                                             "preference": {}}]
    assert job.model_dump() == before


def test_no_excluded_nodes_keep_the_affinity_as_is() -> None:
    assert exclude_nodes(None, []) is None
    assert exclude_nodes({"podAffinity": {}}, []) == {"podAffinity": {}}


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
    assert container["resources"]["limits"] == {"cpu": "100m", "memory": "128Mi"}
