from __future__ import annotations

from typing import Any

import pytest
from multinode.testing import stored_job

from multinode.api import RESERVED_ENV_NAMES
from multinode.api.elastic import ElasticSpec
from multinode.progress import MARKER, MARKER_ENV
from multinode.render import attempt_env_name, operator_env, render_attempt_env, render_node_pod
from multinode.render.env import PER_POD_STORAGE_ENV
from multinode.testing import node_env


def as_map(env: list[dict[str, Any]]) -> dict[str, Any]:
    return {var["name"]: var.get("value", var.get("valueFrom")) for var in env}


def test_values_for_a_4_node_8_gpu_job() -> None:
    env = as_map(node_env(stored_job(num_nodes=4, resourcesPerNode={"gpus": 8}), 2, 1))
    leader = "llama-0.llama.ml.svc"
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == env["BT_LEADER_ADDR"] == leader
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29501", "attempt 1: rendezvousPort + 1"
    assert env["MULTINODE_RDZV_ID"] == env["PET_RDZV_ID"] == "uid-123-a1"
    assert env["NNODES"] == env["PET_NNODES"] == env["BT_GROUP_SIZE"] == "4"
    assert env["NODE_RANK"] == env["PET_NODE_RANK"] == env["BT_NODE_RANK"] == "2"
    assert env["MULTINODE_NODE_INDEX"] == "2"
    assert env["NPROC_PER_NODE"] == env["PET_NPROC_PER_NODE"] == "8"
    assert env["WORLD_SIZE"] == "32"
    assert env["BT_NUM_GPUS"] == "8"
    assert env["MULTINODE_JOB_NAME"] == env["BT_TRAINING_JOB_NAME"] == "llama"
    assert env["MULTINODE_NAMESPACE"] == "ml"
    assert env["MULTINODE_ATTEMPT"] == "1"
    assert env["MULTINODE_SERVICE"] == "llama"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["MULTINODE_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["MULTINODE_HOST_NODE"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_all_values_are_strings() -> None:
    for var in node_env(stored_job(network={"nccl": {"debug": "INFO"}}), 0, 0):
        assert isinstance(var.get("value", ""), str), var


def test_num_proc_per_node_overrides_gpu_count() -> None:
    job = stored_job(num_nodes=3, resourcesPerNode={"gpus": 8}, numProcPerNode=2)
    env = as_map(node_env(job, 0, 0))
    assert (env["NPROC_PER_NODE"], env["WORLD_SIZE"], env["BT_NUM_GPUS"]) == ("2", "6", "8")


def test_cpu_job_runs_one_process_per_node() -> None:
    env = as_map(node_env(stored_job(num_nodes=5), 4, 0))
    assert (env["NPROC_PER_NODE"], env["WORLD_SIZE"], env["BT_NUM_GPUS"]) == ("1", "5", "0")


def test_custom_rendezvous_port() -> None:
    env = as_map(node_env(stored_job(network={"rendezvousPort": 23456}), 1, 0))
    assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "23456"


def test_nccl_variables_only_when_set() -> None:
    assert not [n for n in as_map(node_env(stored_job(), 0, 0)) if n.startswith("NCCL_")]
    nccl = {"socketIfname": "net1", "ibHca": "=mlx5_0,mlx5_1", "debug": "WARN"}
    env = as_map(node_env(stored_job(network={"nccl": nccl}), 0, 0))
    assert env["NCCL_SOCKET_IFNAME"] == "net1"
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert env["NCCL_DEBUG"] == "WARN"
    assert "NCCL_DEBUG_SUBSYS" not in env


def test_user_env_comes_after_ours_unchanged() -> None:
    user = [
        {"name": "RDZV", "value": "$(MASTER_ADDR):$(MASTER_PORT)"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    job = stored_job(env=user)
    env = node_env(job, 0, 0)
    assert env[-2:] == user
    assert sorted(env[:-2], key=lambda v: v["name"]) == sorted(operator_env(job, 0, 0), key=lambda v: v["name"])


def test_reserved_names_are_exactly_the_names_we_set() -> None:
    nccl = {"socketIfname": "a", "ibHca": "b", "debug": "INFO", "debugSubsys": "ALL"}
    job = stored_job(network={"nccl": nccl}, cache={"claimName": "c"}, checkpointing={"claimName": "k"})
    names = [var["name"] for var in operator_env(job, 0, 0)]
    assert len(names) == len(set(names)), "a variable is set twice"
    elastic = [var["name"] for var in operator_env(job.model_copy(update={"spec": job.spec.model_copy(
        update={"elastic": ElasticSpec(min_nodes=1)})}), 0, 0)]
    assert len(elastic) == len(set(elastic)), "a variable is set twice"
    # Only an InPlace job's pods carry the attempt file (tests/unit/render/test_render_in_place.py), only an
    # elastic job's the c10d rendezvous, and only its store pod the store's port (test_render_rendezvous_store).
    assert set(names) | set(elastic) | {"MULTINODE_ATTEMPT_FILE", "MULTINODE_RENDEZVOUS_STORE_PORT"} == \
        RESERVED_ENV_NAMES


@pytest.mark.parametrize("index", [-1, 2])
def test_rejects_index_outside_the_gang(index: int) -> None:
    with pytest.raises(ValueError):
        node_env(stored_job(num_nodes=2), index, 0)


def test_every_trainer_gets_the_progress_marker_the_heartbeat_helper_prints() -> None:
    env = as_map(node_env(stored_job(num_nodes=2), 1, 0))
    assert env[MARKER_ENV] == MARKER == "[multinode-progress]"
    assert MARKER_ENV in RESERVED_ENV_NAMES  # spec.env cannot override it


def test_consecutive_attempts_never_share_a_rendezvous_port_or_id() -> None:
    # The fence: a pod of an earlier attempt that outlived a partition resolves the same leader name, so
    # the port and the rendezvous id must differ from the current attempt's.
    job = stored_job(2)

    def rendezvous(attempt: int) -> tuple[str, str]:
        env = as_map(node_env(job, 1, attempt))
        return env["MASTER_PORT"], env["PET_RDZV_ID"]

    seen = [rendezvous(a) for a in range(6)]
    assert [port for port, _ in seen] == ["29500", "29501", "29502", "29503", "29500", "29501"]
    assert len({rdzv for _, rdzv in seen}) == 6
    for a in range(5):
        assert seen[a] != seen[a + 1]


@pytest.mark.parametrize("base", [1, 65532, 65533, 65535])
def test_rendezvous_ports_stay_in_range_and_distinct_within_the_span(base: int) -> None:
    job = stored_job(2, network={"rendezvousPort": base})
    ports = [int(as_map(node_env(job, 0, a))["MASTER_PORT"]) for a in range(4)]
    assert ports[0] == base
    assert all(1 <= p <= 65535 for p in ports) and len(set(ports)) == 4


# What only an elastic job's pods (the c10d rendezvous) and its store pod carry.
ELASTIC_ONLY = {"PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_RDZV_CONF", "PET_MAX_RESTARTS", "PET_LOCAL_ADDR",
                "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "MULTINODE_MIN_NODES", "MULTINODE_RENDEZVOUS_STORE_PORT"}


def test_the_pod_carries_only_what_differs_between_nodes_and_reads_the_rest_from_its_attempt() -> None:
    nccl = {"socketIfname": "a", "ibHca": "b", "debug": "INFO", "debugSubsys": "ALL"}
    job = stored_job(4, resourcesPerNode={"gpus": 8}, cache={"claimName": "c"}, checkpointing={"claimName": "k"},
                     network={"nccl": nccl})
    pods = [render_node_pod(job, i, 2, resume_from="/ckpt/7") for i in range(4)]
    inline = [{v["name"] for v in p["spec"]["containers"][0]["env"]} for p in pods]
    per_node = {"NODE_RANK", "PET_NODE_RANK", "MULTINODE_NODE_INDEX", "BT_NODE_RANK", "MULTINODE_POD_NAME",
                "MULTINODE_HOST_NODE", *PER_POD_STORAGE_ENV}
    assert all(names == per_node for names in inline)
    config_map = render_attempt_env(job, 2, restarts=1)
    assert config_map["metadata"]["name"] == attempt_env_name(job, 2)
    for pod in pods:
        for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]:
            assert c["envFrom"] == [{"configMapRef": {"name": attempt_env_name(job, 2)}}]
    # The ConfigMap and the inline part together are the whole contract, each name once.
    assert not set(config_map["data"]) & per_node
    assert set(config_map["data"]) | per_node | {"MULTINODE_ATTEMPT_FILE"} | ELASTIC_ONLY == RESERVED_ENV_NAMES
    assert all(isinstance(v, str) for v in config_map["data"].values())


def test_the_attempt_config_map_is_owned_by_the_job_immutable_and_per_attempt() -> None:
    job = stored_job(2)
    first, second = render_attempt_env(job, 0), render_attempt_env(job, 1)
    assert first["immutable"] is True
    assert first["metadata"]["ownerReferences"][0]["uid"] == "uid-123"
    assert first["metadata"]["namespace"] == "ml"
    assert first["metadata"]["name"] != second["metadata"]["name"]
    assert first["data"]["PET_RDZV_ID"] != second["data"]["PET_RDZV_ID"]
    # A job created again under the same name (new uid) never finds the old job's ConfigMap under its name.
    again = stored_job(2, uid="uid-456")
    assert attempt_env_name(again, 0) != attempt_env_name(job, 0)


def test_user_env_may_refer_to_the_attempts_variables() -> None:
    # The kubelet expands $(NAME) against envFrom and earlier env entries: the shared variables come first.
    job = stored_job(env=[{"name": "RDZV", "value": "$(MASTER_ADDR):$(MASTER_PORT)"}])
    container = render_node_pod(job, 0, 0)["spec"]["containers"][0]
    assert container["envFrom"] and container["env"][-1]["name"] == "RDZV"
