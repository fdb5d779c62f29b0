"""Node health: what `spec.healthCheck` asks each node to prove before training, how a node's verdict
travels from the preflight container to the operator, and how it shows in the status.

The preflight writes its verdict as one small JSON object to the container's termination log; the
kubelet copies it into the pod status, where the operator reads it back (`reconcile/observe.py`). Both
sides use `health_message` and `parse_health_message` from here, so the format is spelled once.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field

from multinode.api.base import ApiModel

# RDMA memory registration pins pages and counts them against RLIMIT_MEMLOCK (CAP_IPC_LOCK lifts the
# limit): with a container's usual 64 KiB or 8 MiB, NCCL's IB transport fails or crawls. 64 GiB covers
# registering the buffers of a node's GPUs; vendors recommend unlimited.
DEFAULT_MEMLOCK_FLOOR_BYTES = 64 * 2**30
# How long a node that failed the health check is kept out of the job's next attempts.
DEFAULT_EXCLUSION_SECONDS = 3600
MAX_EXCLUSION_SECONDS = 7 * 86400
# status.excludedNodes keeps the newest entries only: a job cycling through a bad rack must not grow its
# status without bound (each entry is also one term of every new pod's node affinity).
MAX_EXCLUDED_NODES = 32
# The kubelet keeps 4096 bytes of a termination message; a verdict is far smaller than that.
MAX_HEALTH_MESSAGE = 1024
# The key that marks a termination message as a health verdict (older preflights wrote plain text).
HEALTH_KEY = "health"


class HealthStatus(StrEnum):
    PASSED = "Passed"
    FAILED = "Failed"


class HealthReason(StrEnum):
    """Why a node passed or failed its health check (status.nodeStatuses[].health.reason)."""

    HEALTHY = "Healthy"
    GPUS_NOT_VISIBLE = "GPUsNotVisible"
    RDMA_DEVICES_MISSING = "RDMADevicesMissing"
    MEMLOCK_TOO_LOW = "MemlockTooLow"
    SHM_TOO_SMALL = "ShmTooSmall"


class HealthCheckSpec(ApiModel):
    """Checks each node's preflight runs before training; a node that fails is excluded and the gang
    restarts elsewhere, without counting against failurePolicy.maxRestarts."""

    enabled: bool = Field(True, description="Run the checks at all; false skips every one of them.")
    gpus: bool = Field(True, description="The GPUs the node was allocated are visible to the container "
                                         "(NVIDIA_VISIBLE_DEVICES, /dev/nvidiaN, nvidia-smi -L). Only when "
                                         "resourcesPerNode.gpus > 0.")
    rdma: bool = Field(True, description="RDMA devices are present (/dev/infiniband/uverbs*, or the device "
                                         "plugin's env) and the memlock limit is high enough. Only when "
                                         "network.rdma is set.")
    shm: bool = Field(True, description="/dev/shm holds at least shmSize. Only when shmSize is set.")
    rdma_device_env: str | None = Field(
        None, max_length=253, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
        description="Env var in which the RDMA device plugin lists the allocated device IDs, comma-separated "
                    "(SR-IOV: PCIDEVICE_<RESOURCE>); checked when /dev/infiniband has no uverbs devices.")
    memlock_floor_bytes: int = Field(
        DEFAULT_MEMLOCK_FLOOR_BYTES, ge=0,
        description="Lowest RLIMIT_MEMLOCK that passes the RDMA check (unlimited and CAP_IPC_LOCK always pass).")
    exclusion_seconds: int = Field(
        DEFAULT_EXCLUSION_SECONDS, ge=60, le=MAX_EXCLUSION_SECONDS,
        description="How long a node that failed is kept out of the job's attempts (status.excludedNodes).")


class NodeHealth(ApiModel):
    """A node's health verdict, from its preflight's termination message."""

    # Frozen (hashable): the controller's observed pod records, which hold one, are frozen dataclasses.
    model_config = ConfigDict(frozen=True, **ApiModel.model_config)

    status: HealthStatus = Field(description="Passed or Failed.")
    reason: str = Field(max_length=128, description="CamelCase: Healthy, GPUsNotVisible, RDMADevicesMissing, "
                                                    "MemlockTooLow or ShmTooSmall.")
    message: str | None = Field(None, max_length=MAX_HEALTH_MESSAGE,
                                description="What was found; in status.nodeStatuses only when it failed.")


class ExcludedNode(ApiModel):
    """A node the job's next attempts stay off, until `until`."""

    node: str = Field(max_length=253, description="Kubernetes node name.")
    reason: str = Field(max_length=128, description="Why, CamelCase (e.g. GPUsNotVisible).")
    message: str = Field("", max_length=MAX_HEALTH_MESSAGE, description="What the check found.")
    until: str = Field(description="RFC3339 time the exclusion ends.", json_schema_extra={"format": "date-time"})


def health_message(status: HealthStatus, reason: str, message: str) -> str:
    """The termination message of a preflight that ran the health check."""
    return json.dumps({HEALTH_KEY: status.value, "reason": reason, "message": message[:MAX_HEALTH_MESSAGE]})


def parse_health_message(text: str | None) -> NodeHealth | None:
    """The verdict in a termination message; None when it holds none (plain text, or garbage)."""
    if not text or not text.lstrip().startswith("{"):
        return None
    try:
        data: Any = json.loads(text)
        return NodeHealth(status=HealthStatus(data[HEALTH_KEY]), reason=str(data["reason"])[:128],
                          message=str(data.get("message") or "")[:MAX_HEALTH_MESSAGE] or None)
    except (ValueError, KeyError, TypeError):
        return None
