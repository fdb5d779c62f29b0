"""The fullest TrainingJob: every field of the spec and of the status set.

For tests of code that reads TrainingJobs (a dashboard, an exporter, a policy), which should cope with every
field; multinode's own tests use it for the models' round trips (tests/unit/api/test_api_crd.py fails when
a field of the CRD is missing here) and as the base of the admission tests' maximal job.
"""

from __future__ import annotations

from typing import Any

from multinode.api import API_VERSION, KIND
from multinode.api.conditions import ConditionType, Reason


def full_job() -> dict[str, Any]:
    """TrainingJob `llama-pretrain` in `ml` as the apiserver stores it: every spec and status field set,
    the defaulted ones spelled out, metadata as the apiserver and kopf wrote it. A new dict on each call."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": "llama-pretrain",
            "namespace": "ml",
            "uid": "3f1c2a9e-0000-4000-8000-000000000001",
            "generation": 1,
            "resourceVersion": "4711",
            "creationTimestamp": "2025-01-02T03:04:05Z",
            "labels": {"team": "research"},
            "annotations": {"note": "x"},
            "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"],
        },
        "spec": {
            "numNodes": 4,
            "spareNodes": 1,
            "numProcPerNode": 8,
            "image": "registry.example.com/train:1.2",
            "imagePullPolicy": "IfNotPresent",
            "command": ["torchrun", "train.py"],
            "args": ["--lr", "3e-4"],
            "workingDir": "/workspace",
            "env": [
                {"name": "DATA_DIR", "value": "/data"},
                {
                    "name": "HF_TOKEN",
                    "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
                },
            ],
            "resourcesPerNode": {
                "gpus": 8,
                "gpuResourceName": "nvidia.com/gpu",
                "cpu": "32",
                "memory": "256Gi",
            },
            "accelerator": "NVIDIA-H100-80GB-HBM3",
            "shmSize": "64Gi",
            "network": {
                "rendezvousPort": 29500,
                "hostNetwork": False,
                "multusNetworks": ["ib-a", "ib-b"],
                "rdma": {"resourceName": "rdma/hca_shared_devices_a", "count": 1, "ipcLock": True},
                "nccl": {
                    "socketIfname": "net1",
                    "ibHca": "=mlx5_0,mlx5_1",
                    "debug": "WARN",
                    "debugSubsys": "INIT,NET",
                },
            },
            "successPolicy": "AllNodes",
            "podTemplate": {
                "labels": {"team": "research"},
                "annotations": {"owner": "alice"},
                "nodeSelector": {"pool": "h100"},
                "tolerations": [
                    {
                        "key": "nvidia.com/gpu",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                    },
                    {
                        "key": "maintenance",
                        "operator": "Equal",
                        "value": "soon",
                        "effect": "NoExecute",
                        "tolerationSeconds": 60,
                    },
                ],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["a"]}
                                    ],
                                    "matchFields": [
                                        {"key": "metadata.name", "operator": "NotIn", "values": ["bad-node"]}
                                    ]
                                }
                            ]
                        }
                    },
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "other-trainer"}},
                             "topologyKey": "kubernetes.io/hostname"}
                        ]
                    }
                },
                "priorityClassName": "training",
                "schedulerName": "volcano",
                "serviceAccountName": "trainer",
                "automountServiceAccountToken": True,
                "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True, "fsGroup": 1000,
                                    "fsGroupChangePolicy": "OnRootMismatch", "supplementalGroups": [2000],
                                    "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/pod.json"},
                                    "appArmorProfile": {"type": "Localhost", "localhostProfile": "trainer"}},
                "containerSecurityContext": {
                    "runAsUser": 1001, "runAsGroup": 1001, "runAsNonRoot": True, "readOnlyRootFilesystem": False,
                    "allowPrivilegeEscalation": False, "privileged": False,
                    "capabilities": {"add": ["SYS_PTRACE"], "drop": ["ALL"]},
                    "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/trainer.json"},
                    "appArmorProfile": {"type": "Localhost", "localhostProfile": "trainer-strict"}},
                "runtimeClassName": "nvidia",
                "terminationGracePeriodSeconds": 120,
                "imagePullSecrets": [{"name": "regcred"}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
                    {"name": "cache", "hostPath": {"path": "/mnt/cache", "type": "Directory"}},
                ],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data", "readOnly": True},
                    {"name": "cache", "mountPath": "/cache", "subPath": "llama"},
                ],
            },
            "cache": {"claimName": "team-cache", "mountPath": "/mnt/cache"},
            "checkpointing": {
                "claimName": "ckpt-backup",
                "mountPath": "/checkpoints",
                "completion": "auto",
                "keep": 3,
                "intervalSeconds": 30,
                "settleSeconds": 60,
                "finalSyncTimeoutSeconds": 1800,
                "beforeDisruptionSeconds": 120,
                "resumeFrom": {"trainingJob": "llama-warmup"},
            },
            "failurePolicy": {
                "maxRestarts": 5,
                "restartStrategy": "InPlace",
                "backoff": {"initialSeconds": 10, "maxSeconds": 600},
                "nodeLossTolerationSeconds": 30,
                "rules": [
                    {"action": "FailJob", "onExitCodes": [{"min": 1, "max": 127}]},
                    {"action": "RestartWithoutCounting", "onReasons": ["OOMKilled"], "onNodeLoss": True},
                ],
            },
            "suspend": False,
            "activeDeadlineSeconds": 86400,
            "ttlSecondsAfterFinished": 3600,
            "cleanPodPolicy": "Running",
            "startupTimeoutSeconds": 900,
            "imageConsistency": {"pinDigest": True, "onMismatch": "FailAttempt"},
            "topology": {"sameDomainLabel": "network.topology.nvidia.com/block"},
            "podGroup": {"minMember": 4},
            "healthCheck": {"enabled": True, "gpus": True, "rdma": True, "shm": False,
                            "rdmaDeviceEnv": "PCIDEVICE_NVIDIA_COM_MLNXNICS", "memlockFloorBytes": 1073741824,
                            "exclusionSeconds": 7200,
                            "collectiveBandwidth": {"minGbps": 25.0, "sizeMiB": 128, "timeoutSeconds": 90}},
            "hangDetection": {"timeoutSeconds": 600,
                              "stragglers": {"factor": 2.0, "forSeconds": 300, "action": "Report"}},
            "scheduling": {"partialGangTimeoutSeconds": 300, "nativePodGroup": False},
        },
        "status": {
            "observedGeneration": 1,
            "phase": "Failed",
            "conditions": [
                {
                    "type": ConditionType.CREATED.value,
                    "status": "True",
                    "reason": Reason.PODS_CREATED.value,
                    "message": "created 4 pods",
                    "lastTransitionTime": "2025-01-02T03:04:06Z",
                    "observedGeneration": 1,
                },
                {
                    "type": ConditionType.RUNNING.value,
                    "status": "True",
                    "reason": Reason.ALL_NODES_RUNNING.value,
                    "message": "",
                    "lastTransitionTime": "2025-01-02T03:05:00Z",
                },
                {
                    "type": ConditionType.FAILED.value,
                    "status": "True",
                    "reason": "NodeFailed",
                    "message": "node 3 exited with code 1",
                    "lastTransitionTime": "2025-01-02T04:00:00Z",
                },
            ],
            "readyNodes": 3,
            "numNodes": 4,
            "ready": "3/4",
            "startTime": "2025-01-02T03:04:06Z",
            "resumedFrom": "/checkpoints/llama-warmup/checkpoint-900",
            "resumedBy": [{"path": "/checkpoints/llama-pretrain/checkpoint-900", "trainingJob": "llama-finetune"}],
            "checkpointRequest": {"id": "a0-20260101T000000", "reason": Reason.NODE_CORDONED.value,
                                  "message": "node gpu-17 is cordoned", "attempt": 0, "step": 1000,
                                  "requestedTime": "2026-01-01T00:00:00Z", "state": "Mirrored",
                                  "checkpoint": "checkpoint-1000", "doneTime": "2026-01-01T00:00:20Z"},
            "checkpoints": {
                "latest": {
                    "name": "checkpoint-1000",
                    "path": "/checkpoints/llama-pretrain/checkpoint-1000",
                    "step": 1000,
                    "bytes": 123456789,
                    "mirroredAt": "2025-01-02T03:50:00Z",
                },
                "mirrored": 2,
                "lastSyncTime": "2025-01-02T03:50:00Z",
                "problem": {"reason": "SourceChanged", "message": "checkpoint-1100/rank_00001.pt changed",
                            "time": "2025-01-02T03:55:00Z"},
                "finalSyncTime": "2025-01-02T04:01:00Z",
                "notReady": [{"name": "checkpoint-1100", "step": 1100, "reason": "WaitingForRankFiles",
                              "message": "/cache/llama-pretrain/checkpoint-1100: rank_00003.pt missing",
                              "since": "2025-01-02T03:58:00Z"}],
            },
            "completionTime": "2025-01-02T04:00:00Z",
            "nodeStatuses": [
                {
                    "index": 0,
                    "pod": "llama-pretrain-0-a0",
                    "node": "gpu-17",
                    "phase": "Running",
                    "health": {"status": "Passed", "reason": "Healthy", "message": "8 GPUs visible",
                               "bandwidth": {"inboundGbps": 92.5, "outboundGbps": 94.1, "algbwGbps": 49.3,
                                             "busbwGbps": 86.3}},
                },
                {
                    "index": 3,
                    "pod": "llama-pretrain-3-a0",
                    "node": "gpu-02",
                    "phase": "Failed",
                    "reason": "Error",
                    "exitCode": 1,
                },
            ],
            "nodeStatusesOmitted": 2,
            "nodeCounts": {"noPod": 0, "pending": 0, "running": 3, "succeeded": 0, "failed": 1, "unknown": 0,
                           "notFine": 1},
            "attempt": 0,
            "podsAttempt": 0,
            "restartStrategy": "InPlace",
            "restarts": 1,
            "uncountedRestarts": 1,
            "restartHistory": [
                {"attempt": 0, "reason": Reason.NODE_LOST.value,
                 "message": "pod llama-pretrain-2-a0 of node 2 was deleted", "counted": False,
                 "time": "2025-01-02T03:20:00Z", "index": 2, "spare": 0},
                {"attempt": 1, "reason": Reason.POD_FAILED.value,
                 "message": "pod llama-pretrain-3-a1 (node 3) failed: exit code 1", "counted": True,
                 "time": "2025-01-02T03:40:00Z"},
            ],
            "nextAttemptTime": "2025-01-02T03:40:05Z",
            "attemptStartTime": "2025-01-02T03:40:06Z",
            "attemptScheduledTime": "2025-01-02T03:40:08Z",
            "imageDigest": "registry.example.com/train@sha256:" + "ab" * 32,
            "topologyDomain": "block-7",
            "goodput": {
                "productiveSeconds": 2400, "lostSeconds": 600, "percent": 80, "spareSeconds": 3000,
                "reducedSeconds": 120,
                "attemptProductiveSeconds": 1680,
                "lost": {"scheduling": 60, "startup": 180, "restart": 130, "redone": 230, "hang": 0},
                "accountedUntil": "2025-01-02T04:10:00Z",
            },
            "excludedNodes": [{"node": "gpu-09", "reason": "GPUsNotVisible",
                               "message": "8 GPUs requested, fewer visible: 7 in nvidia-smi -L",
                               "until": "2025-01-02T05:00:00Z"}],
            "progress": {
                "attempt": 1, "step": 1200, "lastProgressTime": "2026-01-01T00:10:00Z",
                "firstProgressTime": "2026-01-01T00:01:00Z", "source": "Heartbeat", "medianStepSeconds": 0.5,
                "stalledRanks": [{"index": 3, "node": "gpu-node-3", "step": 1190, "stepSeconds": 0.5,
                                  "lastProgressTime": "2026-01-01T00:09:55Z", "since": "2026-01-01T00:09:55Z",
                                  "reported": False}],
                "stalledCount": 1,
                "stragglers": [{"index": 2, "node": "gpu-node-2", "step": 1200, "stepSeconds": 1.5,
                                "lastProgressTime": "2026-01-01T00:10:00Z", "since": "2026-01-01T00:04:00Z",
                                 "reported": True}],
                "stragglerCount": 1,
            },
            "spares": {"wanted": 1, "warm": 1, "starting": 0, "taken": 1},
            "currentNodes": 3,
            # spec.elastic's (which this spec, with spares, cannot have: the status model takes it anyway).
            "elastic": {"shed": [{"index": 1, "pod": "llama-1-a2", "uid": "0f9c2a6e-1b1d-4c1e-9a55-6a7f5e2d9b10",
                                  "reason": Reason.NODE_LOST.value, "time": "2025-01-02T03:50:00Z"}],
                        "resizes": 3, "lastResizeTime": "2025-01-02T03:50:00Z",
                        "belowMinSince": "2025-01-02T03:50:00Z",
                        "storeUid": "5d1e0c8a-9f3b-4e2a-8c61-2b7f0e4a9d33", "storeShared": True},
            "scheduling": {"gang": "None", "podGroup": "llama-a2", "partialSince": "2025-01-01T00:10:00Z",
                           "releases": 1, "nextTryTime": "2025-01-01T00:11:00Z"},
        },
    }
