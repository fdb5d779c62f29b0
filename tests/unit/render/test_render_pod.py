from __future__ import annotations

from typing import Any

import pytest
from multinode.testing import stored_job

from pydantic import ValidationError

from multinode.render import RenderSettings, render_headless_service, render_node_pod
from multinode.render.pod import one_pod_per_node
from multinode.render.settings import OPERATOR_IMAGE_REPOSITORY
from multinode.render.spare import render_spare_pod
from tests.support.packaging import PROJECT_VERSION
from multinode.testing import node_env, preflight, preflight_env, trainer


def env_of(env: list[dict[str, Any]]) -> dict[str, Any]:
    return {var["name"]: var.get("value", var.get("valueFrom")) for var in env}


def contains_none(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(contains_none(item) for item in value.values())
    if isinstance(value, list):
        return any(contains_none(item) for item in value)
    return False


@pytest.mark.parametrize("num_nodes", [1, 2, 64])
def test_gang_of_n_nodes(num_nodes: int) -> None:
    job = stored_job(num_nodes=num_nodes, resourcesPerNode={"gpus": 8})
    service, pods = render_headless_service(job), [render_node_pod(job, i, 3) for i in range(num_nodes)]
    assert service["metadata"]["name"] == "llama"
    assert len(pods) == num_nodes
    assert len({pod["metadata"]["name"] for pod in pods}) == num_nodes
    for index, pod in enumerate(pods):
        meta, spec = pod["metadata"], pod["spec"]
        assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
        assert meta["name"] == f"llama-{index}-a3"
        assert meta["namespace"] == "ml"
        assert meta["labels"] == {
            "multinode.dev/job-name": "llama",
            "multinode.dev/node-index": str(index),
            "multinode.dev/attempt": "3",
            "app.kubernetes.io/managed-by": "multinode",
            "app.kubernetes.io/name": "multinode-trainingjob",
        }
        (owner,) = meta["ownerReferences"]
        assert owner == {
            "apiVersion": "multinode.dev/v1alpha1",
            "kind": "TrainingJob",
            "name": "llama",
            "uid": "uid-123",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert spec["hostname"] == f"llama-{index}"
        assert spec["subdomain"] == "llama"
        assert spec["restartPolicy"] == "Never"
        env = env_of(node_env(job, index, 3))
        assert env["NODE_RANK"] == env["PET_NODE_RANK"] == str(index)
        assert env["MASTER_ADDR"] == "llama-0.llama.ml.svc"
        assert env["NNODES"] == str(num_nodes)
        assert env["WORLD_SIZE"] == str(num_nodes * 8)
        assert env["MULTINODE_ATTEMPT"] == "3"
        assert not contains_none(pod)


def test_trainer_container_fields() -> None:
    job = stored_job(
        imagePullPolicy="Always",
        command=["torchrun"],
        args=["train.py", "--steps", "10"],
        workingDir="/workspace",
    )
    container = trainer(render_node_pod(job, 0, 0))
    assert container["image"] == "registry/train:1.2"
    assert container["imagePullPolicy"] == "Always"
    assert container["command"] == ["torchrun"]
    assert container["args"] == ["train.py", "--steps", "10"]
    assert container["workingDir"] == "/workspace"


def test_minimal_job_omits_unset_fields() -> None:
    pod = render_node_pod(stored_job(), 0, 0)
    container = trainer(pod)
    for key in ("imagePullPolicy", "command", "args", "workingDir", "resources"):
        assert key not in container
    for key in ("nodeSelector", "hostNetwork", "dnsPolicy", "imagePullSecrets", "priorityClassName",
                "schedulerName", "serviceAccountName", "securityContext", "runtimeClassName",
                "terminationGracePeriodSeconds"):
        assert key not in pod["spec"]
    assert pod["spec"]["affinity"] == {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        one_pod_per_node("llama", 0)]}}
    assert "annotations" not in pod["metadata"]
    assert not contains_none(pod)


def test_gpu_limits() -> None:
    pod = render_node_pod(stored_job(resourcesPerNode={"gpus": 8}), 0, 0)
    resources = trainer(pod)["resources"]
    assert resources == {"limits": {"nvidia.com/gpu": "8"}}


def test_cpu_job_has_no_gpu_key_and_one_process() -> None:
    job = stored_job(resourcesPerNode={"gpus": 0, "cpu": "4"})
    container = trainer(render_node_pod(job, 0, 0))
    assert container["resources"] == {"limits": {"cpu": "4"}, "requests": {"cpu": "4"}}
    assert env_of(node_env(job, 0, 0))["NPROC_PER_NODE"] == "1"


def test_custom_gpu_resource_cpu_and_memory() -> None:
    job = stored_job(
        resourcesPerNode={
            "gpus": 4,
            "gpuResourceName": "amd.com/gpu",
            "cpu": "32",
            "memory": "256Gi",
        }
    )
    resources = trainer(render_node_pod(job, 1, 0))["resources"]
    assert resources == {
        "limits": {"amd.com/gpu": "4", "cpu": "32", "memory": "256Gi"},
        "requests": {"cpu": "32", "memory": "256Gi"},
    }


def test_rdma_adds_devices_and_ipc_lock() -> None:
    job = stored_job(
        resourcesPerNode={"gpus": 8}, network={"rdma": {"resourceName": "rdma/ib", "count": 2}}
    )
    container = trainer(render_node_pod(job, 0, 0))
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/ib": "2"}
    assert container["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"], "drop": ["ALL"]}


def test_no_ipc_lock_without_rdma() -> None:
    container = trainer(render_node_pod(stored_job(resourcesPerNode={"gpus": 8}), 0, 0))
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert not [name for name in container["resources"]["limits"] if name.startswith("rdma/")]


def test_shm_is_always_a_memory_volume() -> None:
    unsized = render_node_pod(stored_job(), 0, 0)
    assert unsized["spec"]["volumes"][0] == {"name": "dshm", "emptyDir": {"medium": "Memory"}}
    assert trainer(unsized)["volumeMounts"][0] == {"name": "dshm", "mountPath": "/dev/shm"}
    sized = render_node_pod(stored_job(shmSize="64Gi"), 0, 0)
    assert sized["spec"]["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}


def test_user_volumes_and_mounts_follow_shm() -> None:
    job = stored_job(
        podTemplate={
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
        }
    )
    pod = render_node_pod(job, 0, 0)
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["dshm", "data"]
    assert pod["spec"]["volumes"][1] == {
        "name": "data",
        "persistentVolumeClaim": {"claimName": "datasets"},
    }
    assert trainer(pod)["volumeMounts"][1] == {
        "name": "data",
        "mountPath": "/data",
        "readOnly": True,
    }


def test_multus_annotation_joins_networks_in_order() -> None:
    job = stored_job(
        network={"multusNetworks": ["ib-a", "ib-b"]},
        podTemplate={"annotations": {"owner": "alice"}},
    )
    annotations = render_node_pod(job, 0, 0)["metadata"]["annotations"]
    assert annotations == {"owner": "alice", "k8s.v1.cni.cncf.io/networks": "ib-a,ib-b"}


def test_host_network_switches_dns_policy() -> None:
    pod_spec = render_node_pod(stored_job(network={"hostNetwork": True}), 0, 0)["spec"]
    assert pod_spec["hostNetwork"] is True
    assert pod_spec["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_accelerator_joins_the_node_selector() -> None:
    job = stored_job(
        accelerator="NVIDIA-H100-80GB-HBM3", podTemplate={"nodeSelector": {"pool": "a"}}
    )
    assert render_node_pod(job, 0, 0)["spec"]["nodeSelector"] == {
        "pool": "a",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }


def test_template_labels_never_override_ours() -> None:
    job = stored_job(
        podTemplate={"labels": {"team": "research", "multinode.dev/job-name": "spoofed"}}
    )
    labels = render_node_pod(job, 1, 0)["metadata"]["labels"]
    assert labels["team"] == "research"
    assert labels["multinode.dev/job-name"] == "llama"


def test_one_pod_per_node_is_a_required_anti_affinity_among_the_attempts_node_pods() -> None:
    # Whatever the pods ask for: a 1-GPU pod must not share a machine with another node of its job. Only the
    # same attempt's pods: the previous attempt's, terminating after a restart, must not block the new gang.
    for attempt in (0, 3):
        pod = render_node_pod(stored_job(4, resourcesPerNode={"gpus": 1}), 2, attempt)
        (term,) = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term == {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {
            "multinode.dev/job-name": "llama", "multinode.dev/attempt": str(attempt)}}}
        assert term["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_a_malformed_affinity_is_refused_by_field_not_at_render() -> None:
    for affinity, where in (({"nodeAffinity": "zone-a"}, "nodeAffinity"),
                            ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": "zone-a"}}}, "nodeSelectorTerms"),
                            ({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
                             "requiredDuringSchedulingIgnoredDuringExecution")):
        with pytest.raises(ValidationError) as refused:
            stored_job(2, podTemplate={"affinity": affinity})
        assert where in str(refused.value) and "affinity" in str(refused.value)


def test_scheduling_fields_pass_through() -> None:
    affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    job = stored_job(
        podTemplate={
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "affinity": affinity,
            "priorityClassName": "training",
            "schedulerName": "volcano",
            "serviceAccountName": "trainer",
            "imagePullSecrets": [{"name": "regcred"}],
            "terminationGracePeriodSeconds": 5,
        }
    )
    spec = render_node_pod(job, 0, 0)["spec"]
    assert spec["terminationGracePeriodSeconds"] == 5
    assert render_spare_pod(job, 0, RenderSettings())["spec"]["terminationGracePeriodSeconds"] == 5, "a spare too"
    assert spec["tolerations"][0] == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert spec["affinity"] == {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [],
                                                    "requiredDuringSchedulingIgnoredDuringExecution": [
                                                        one_pod_per_node("llama", 0)]}}
    assert spec["priorityClassName"] == "training"
    assert spec["schedulerName"] == "volcano"
    assert spec["serviceAccountName"] == "trainer"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]


def test_user_env_reaches_the_trainer_only() -> None:
    secret = {"secretKeyRef": {"name": "hf", "key": "t"}}
    job = stored_job(env=[{"name": "HF_TOKEN", "valueFrom": secret}])
    pod = render_node_pod(job, 1, 0)
    trainer_env = trainer(pod)["env"]
    assert trainer_env[-1]["name"] == "HF_TOKEN"
    assert "env" not in preflight(pod)
    assert "HF_TOKEN" not in {e["name"] for e in preflight_env(job, 1, 0)}


def test_the_preflight_reads_the_peers_from_the_attempts_shared_env() -> None:
    from multinode.preflight.program import peers_from_env

    job = stored_job(num_nodes=3)
    env = {e["name"]: e["value"] for e in preflight_env(job, 1, 0)}
    assert {"MULTINODE_JOB_NAME", "MULTINODE_NAMESPACE", "MULTINODE_SERVICE", "NNODES"} <= set(env)
    assert peers_from_env(env) == [f"{job.metadata.name}-{i}.{job.metadata.name}.{job.metadata.namespace}.svc"
                                   for i in range(3)]


def test_preflight_init_container() -> None:
    settings = RenderSettings(
        operator_image="example.com/multinode:dev", preflight_timeout_seconds=90
    )
    job = stored_job()
    container = preflight(render_node_pod(job, 1, 2, settings))
    assert container["image"] == "example.com/multinode:dev"
    assert container["command"] == ["multinode", "preflight"]
    assert container["args"] == ["--timeout", "90"]
    assert container["resources"] == {
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "limits": {"cpu": "1", "memory": "128Mi"},
    }
    env = env_of(preflight_env(job, 1, 2))
    assert env["MULTINODE_SERVICE"] == "llama" and env["NNODES"] == "2"


@pytest.mark.parametrize(("trainer_cpu", "limit"), [
    (None, "1"),  # a trainer without a CPU limit: one CPU, enough for a Python start
    ("96", "1"),
    ("1", "1"),
    ("1000m", "1000m"),
    ("0.5", "0.5"),  # the trainer's: the pod's limit is what it was with the floor alone
    ("200m", "200m"),
    ("100m", "100m"),
    ("50m", "100m"),  # never below the floor, its limit before
])
def test_the_preflight_cpu_limit_is_the_trainers_between_a_tenth_and_one_cpu(trainer_cpu: str | None,
                                                                            limit: str) -> None:
    resources = {"gpus": 0} if trainer_cpu is None else {"cpu": trainer_cpu}
    container = preflight(render_node_pod(stored_job(2, resourcesPerNode=resources), 0, 0))
    assert container["resources"]["limits"]["cpu"] == limit
    assert container["resources"]["requests"]["cpu"] == "50m"


def test_default_settings_use_the_released_operator_image() -> None:
    container = preflight(render_node_pod(stored_job(), 0, 0))
    assert container["image"] == f"{OPERATOR_IMAGE_REPOSITORY}:{PROJECT_VERSION}"
    assert container["args"] == ["--timeout", "300"]


@pytest.mark.parametrize("settings", [{"preflight_timeout_seconds": 0}, {"operator_image": ""}])
def test_settings_reject_nonsense(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RenderSettings(**settings)


def test_rendering_does_not_mutate_the_job() -> None:
    job = stored_job(
        podTemplate={"labels": {"a": "b"}, "nodeSelector": {"x": "y"}}, accelerator="A100"
    )
    before = job.model_dump()
    render_headless_service(job)
    render_node_pod(job, 0, 0)
    assert job.model_dump() == before
