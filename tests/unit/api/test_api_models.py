from __future__ import annotations

import pytest
from trainingjob_examples import minimal_trainingjob
from pydantic import ValidationError

from multinode.api import (
    Phase,
    SuccessPolicy,
    TrainingJob,
    TrainingJobSpec,
    TrainingJobStatus,
    effective_num_proc_per_node,
    world_size,
)
from multinode.testing import full_job


def spec(**fields: object) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate({"numNodes": 2, "image": "img", **fields})


def test_reads_camel_case_objects_from_the_apiserver() -> None:
    job = TrainingJob.model_validate(full_job())
    assert job.metadata.name == "llama-pretrain"
    assert job.spec.num_proc_per_node == 8
    assert job.spec.resources_per_node.gpu_resource_name == "nvidia.com/gpu"
    assert job.spec.network.rdma is not None and job.spec.network.rdma.count == 1
    assert job.spec.network.nccl is not None and job.spec.network.nccl.ib_hca == "=mlx5_0,mlx5_1"
    assert job.spec.pod_template.volume_mounts is not None
    assert job.spec.pod_template.volume_mounts[0].mount_path == "/data"
    assert job.status is not None and job.status.phase is Phase.FAILED
    assert job.status.node_statuses[1].exit_code == 1


def test_python_names_are_accepted_too() -> None:
    parsed = TrainingJobSpec(num_nodes=3, image="img", shm_size="1Gi")
    assert parsed.model_dump(by_alias=True, exclude_none=True)["shmSize"] == "1Gi"


def test_round_trip_loses_nothing() -> None:
    original = full_job()
    dumped = TrainingJob.model_validate(original).model_dump(by_alias=True, exclude_none=True)
    assert dumped == original


def test_defaults_of_a_minimal_spec() -> None:
    job = TrainingJob.model_validate(minimal_trainingjob())
    assert job.spec.resources_per_node.gpus == 0
    assert job.spec.resources_per_node.gpu_resource_name == "nvidia.com/gpu"
    assert job.spec.network.rendezvous_port == 29500
    assert job.spec.network.host_network is False
    assert job.spec.network.rdma is None
    assert job.spec.success_policy is SuccessPolicy.ALL_NODES
    assert job.status is None


def test_rdma_defaults_to_one_device_of_the_shared_plugin() -> None:
    rdma = spec(network={"rdma": {}}).network.rdma
    assert rdma is not None
    assert (rdma.resource_name, rdma.count) == ("rdma/hca_shared_devices_a", 1)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"resourcesPerNode": {"gpus": 8}}, 8),
        ({"resourcesPerNode": {"gpus": 0}}, 1),
        ({}, 1),
        ({"resourcesPerNode": {"gpus": 8}, "numProcPerNode": 4}, 4),
        ({"numProcPerNode": 16}, 16),
    ],
)
def test_effective_num_proc_per_node(fields: dict, expected: int) -> None:
    assert effective_num_proc_per_node(spec(**fields)) == expected


def test_world_size_is_nodes_times_processes_per_node() -> None:
    assert world_size(spec(numNodes=4, resourcesPerNode={"gpus": 8})) == 32
    assert world_size(spec(numNodes=4, resourcesPerNode={"gpus": 8}, numProcPerNode=2)) == 8
    assert world_size(spec(numNodes=3)) == 3


@pytest.mark.parametrize(
    "fields",
    [
        {"numNodes": 0},
        {"numNodes": 10**9},  # a typo must not make the operator render a billion pods
        {"numProcPerNode": 0},
        {"image": ""},
        {"imagePullPolicy": "Sometimes"},
        {"resourcesPerNode": {"gpus": -1}},
        {"resourcesPerNode": {"cpu": "-1"}},
        {"resourcesPerNode": {"memory": "256GB"}},
        {"shmSize": "lots"},
        {"accelerator": ""},
        {"network": {"rendezvousPort": 0}},
        {"network": {"rendezvousPort": 65536}},
        {"network": {"rdma": {"count": 0}}},
        {"network": {"multusNetworks": ["ib-a,ib-b"]}},
        {"network": {"nccl": {"debug": "LOUD"}}},
        {"successPolicy": "AnyNode"},
        {"podTemplate": {"tolerations": [{"operator": "Maybe"}]}},
        {"podTemplate": {"volumes": [{"persistentVolumeClaim": {"claimName": "x"}}]}},
        {"podTemplate": {"terminationGracePeriodSeconds": -1}},
        {"podTemplate": {"terminationGracePeriodSeconds": 86401}},
    ],
)
def test_rejects_invalid_spec(fields: dict) -> None:
    with pytest.raises(ValidationError):
        spec(**fields)


@pytest.mark.parametrize("field", ["priorityClassName", "serviceAccountName", "schedulerName"])
@pytest.mark.parametrize("value", ["../../api/v1/namespaces/kube-system/secrets/x", "Trainer", "a b", "", "-a",
                                   "a" * 254])
def test_names_of_other_objects_must_be_dns_subdomains_and_the_error_names_the_field(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as raised:
        spec(podTemplate={field: value})
    assert f"podTemplate.{field}" in str(raised.value)
    assert spec(podTemplate={field: "a.b-c"}).pod_template is not None


@pytest.mark.parametrize("quantity", ["32", "500m", "1.5", "64Gi", "1e3", ".5", "2k"])
def test_accepts_kubernetes_quantities(quantity: str) -> None:
    assert spec(resourcesPerNode={"cpu": quantity}).resources_per_node.cpu == quantity


def test_phase_values_match_printer_vocabulary() -> None:
    assert [phase.value for phase in Phase] == [
        "Pending",
        "Starting",
        "Running",
        "Restarting",
        "Suspended",
        "Succeeded",
        "Failed",
    ]


@pytest.mark.parametrize(("bandwidth", "field", "words"), [
    ({"minGbps": 0}, "minGbps", "greater than 0"),
    ({}, "minGbps", "Field required"),
    ({"minGbps": 10, "sizeMiB": 0}, "sizeMiB", "greater than or equal to 1"),
    ({"minGbps": 10, "sizeMiB": 4096}, "sizeMiB", "less than or equal to 1024"),
    ({"minGbps": 10, "timeoutSeconds": 1}, "timeoutSeconds", "greater than or equal to 5"),
    ({"minGbps": 10, "timeoutSeconds": 3600}, "timeoutSeconds", "less than or equal to 600"),
])
def test_collective_bandwidth_errors_name_the_field(bandwidth: dict, field: str, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        spec(healthCheck={"collectiveBandwidth": bandwidth})
    [error] = caught.value.errors()
    assert error["loc"] == ("healthCheck", "collectiveBandwidth", field) and words in error["msg"], error


def test_collective_bandwidth_is_off_unless_set_and_defaults_its_size_and_time() -> None:
    assert spec().health_check.collective_bandwidth is None
    bandwidth = spec(healthCheck={"collectiveBandwidth": {"minGbps": 25}}).health_check.collective_bandwidth
    assert bandwidth is not None
    assert (bandwidth.min_gbps, bandwidth.size_mib, bandwidth.timeout_seconds) == (25, 64, 60)


def test_a_status_read_with_two_conditions_of_one_type_keeps_the_last() -> None:
    # The list is atomic (one merge patch replaces it whole): the server takes a second entry of a type from
    # another writer of the status, and the operator would write back what it read.
    def condition(type_: str, status: str, message: str) -> dict[str, str]:
        return {"type": type_, "status": status, "reason": "R", "message": message,
                "lastTransitionTime": "2026-11-30T00:00:00Z"}

    status = TrainingJobStatus.model_validate({"conditions": [
        condition("Created", "True", "first"), condition("Running", "False", "x"),
        condition("Created", "False", "second")]})
    assert [(c.type, c.status, c.message) for c in status.conditions] == [
        ("Created", "False", "second"), ("Running", "False", "x")]
