"""Creating and updating TrainingJobs against the apiserver and reading its rejections."""

from __future__ import annotations

import json
from dataclasses import dataclass

from kubernetes import client

from multinode.api import GROUP, PLURAL, VERSION


@dataclass(frozen=True)
class Rejection:
    status: int
    message: str
    fields: tuple[str, ...]  # the field of every cause the apiserver listed

    def names(self, field: str) -> bool:
        """The message names the field and a cause points at it (Strict decoding lists no causes)."""
        return field in self.message and (not self.fields or field in self.fields)


def _rejection(error: client.ApiException) -> Rejection:
    body = json.loads(error.body)
    causes = (body.get("details") or {}).get("causes") or []
    return Rejection(error.status, body["message"], tuple(c.get("field", "") for c in causes))


def create(custom: client.CustomObjectsApi, namespace: str, body: dict, *, dry_run: bool = True,
           strict: bool = False) -> dict:
    kwargs = {"dry_run": "All"} if dry_run else {}
    if strict:
        kwargs["field_validation"] = "Strict"
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, **kwargs)


def create_rejected(custom: client.CustomObjectsApi, namespace: str, body: dict, *, strict: bool = False) -> Rejection:
    try:
        create(custom, namespace, body, strict=strict)
    except client.ApiException as e:
        return _rejection(e)
    raise AssertionError(f"the apiserver accepted an invalid TrainingJob: {body}")


def replace(custom: client.CustomObjectsApi, namespace: str, body: dict, *, dry_run: bool = True) -> dict:
    kwargs = {"dry_run": "All"} if dry_run else {}
    name = body["metadata"]["name"]
    return custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body, **kwargs)


def replace_rejected(custom: client.CustomObjectsApi, namespace: str, body: dict) -> Rejection:
    try:
        replace(custom, namespace, body)
    except client.ApiException as e:
        return _rejection(e)
    raise AssertionError(f"the apiserver accepted an invalid update: {body['spec']}")


def maximal_job(name: str) -> dict:
    """A TrainingJob that sets every field of the spec (test_accepted checks that it still does)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingJob",
        "metadata": {"name": name, "labels": {"team": "research"}},
        "spec": {
            "numNodes": 4,
            "numProcPerNode": 8,
            "image": "registry.example.com/train:1.2",
            "imagePullPolicy": "IfNotPresent",
            "command": ["bash", "-c"],
            "args": ["torchrun --nnodes $(NNODES) train.py --lr 3e-4"],
            "workingDir": "/workspace",
            "env": [
                {"name": "DATA_DIR", "value": "/data"},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                {"name": "EMPTY", "value": ""},
            ],
            "resourcesPerNode": {"gpus": 8, "gpuResourceName": "amd.com/gpu", "cpu": "95500m", "memory": "1000Gi"},
            "accelerator": "NVIDIA-H100-80GB-HBM3",
            "shmSize": "64Gi",
            "network": {
                "rendezvousPort": 23456,
                "hostNetwork": True,
                "multusNetworks": ["ib-a", "kube-system/ib-b@net2"],
                "rdma": {"resourceName": "nvidia.com/mlnxnics", "count": 4, "ipcLock": True},
                "nccl": {"socketIfname": "net1", "ibHca": "=mlx5_0,mlx5_1", "debug": "TRACE",
                         "debugSubsys": "INIT,NET"},
            },
            "successPolicy": "LeaderOnly",
            "podTemplate": {
                "labels": {"team": "research", "app.kubernetes.io/part-of": "llama"},
                "annotations": {"owner": "alice", "example.com/script": "#!/bin/bash\necho hi\n"},
                "nodeSelector": {"pool": "h100", "topology.kubernetes.io/zone": "zone-a"},
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "maintenance", "operator": "Equal", "value": "soon", "effect": "NoExecute",
                     "tolerationSeconds": 60},
                    {"operator": "Exists", "effect": "PreferNoSchedule"},
                ],
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
                         "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-7"]}]}]}},
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "inference"}},
                         "topologyKey": "kubernetes.io/hostname"}
                    ]},
                },
                "automountServiceAccountToken": True,
                "securityContext": {
                    "runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True, "fsGroup": 2000,
                    "fsGroupChangePolicy": "OnRootMismatch", "supplementalGroups": [3000],
                    "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/train.json"},
                    "appArmorProfile": {"type": "Localhost", "localhostProfile": "train"},
                },
                "containerSecurityContext": {
                    "runAsUser": 1001, "runAsGroup": 1001, "runAsNonRoot": True, "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False, "privileged": False,
                    "capabilities": {"add": ["IPC_LOCK"], "drop": ["ALL"]},
                    "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/trainer.json"},
                    "appArmorProfile": {"type": "Localhost", "localhostProfile": "trainer"},
                },
                "runtimeClassName": "nvidia",
                "priorityClassName": "training",
                "schedulerName": "volcano",
                "serviceAccountName": "trainer",
                "imagePullSecrets": [{"name": "regcred"}, {"name": "mirror"}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
                    {"name": "cache", "hostPath": {"path": "/mnt/cache", "type": "Directory"}},
                    {"name": "dshm-extra", "emptyDir": {"medium": "Memory"}},
                ],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data", "readOnly": True},
                    {"name": "cache", "mountPath": "/cache", "subPath": "llama"},
                    {"name": "dshm-extra", "mountPath": "/dev/shmem"},
                ],
            },
            "cache": {"claimName": "team-cache", "mountPath": "/mnt/shared-cache"},
            "checkpointing": {
                "claimName": "ckpt-backup", "mountPath": "/checkpoints", "completion": "deepspeed", "keep": 5,
                "intervalSeconds": 15, "settleSeconds": 30, "finalSyncTimeoutSeconds": 600,
                "resumeFrom": {"trainingJob": "llama-warmup"},
            },
            "failurePolicy": {
                "maxRestarts": 5, "restartStrategy": "Recreate", "backoff": {"initialSeconds": 1, "maxSeconds": 60},
                "rules": [{"action": "FailJob", "onExitCodes": [{"min": 1, "max": 127}], "onReasons": ["Error"],
                           "onNodeLoss": False}],
                "nodeLossTolerationSeconds": 30,
            },
            "suspend": False,
            "activeDeadlineSeconds": 86400,
            "ttlSecondsAfterFinished": 600,
            "cleanPodPolicy": "All",
            "startupTimeoutSeconds": 900,
            "imageConsistency": {"pinDigest": False, "onMismatch": "Report"},
            "topology": {"sameDomainLabel": "network.topology.nvidia.com/block"},
            "podGroup": {"minMember": 4},
            "healthCheck": {"enabled": True, "gpus": True, "rdma": False, "shm": True,
                            "rdmaDeviceEnv": "PCIDEVICE_NVIDIA_COM_MLNXNICS", "memlockFloorBytes": 1073741824,
                            "exclusionSeconds": 7200,
                            "collectiveBandwidth": {"minGbps": 100, "sizeMiB": 256, "timeoutSeconds": 120}},
            "hangDetection": {"timeoutSeconds": 1800,
                              "stragglers": {"factor": 1.5, "forSeconds": 600, "action": "Exclude"}},
            "scheduling": {"partialGangTimeoutSeconds": 300, "nativePodGroup": False},
        },
    }
