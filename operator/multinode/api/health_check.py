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

from multinode.api.base import ApiModel, StatusModel

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
# spec.healthCheck.collectiveBandwidth bounds. While the test runs, the preflight's memory limit grows by this
# many times the buffer: it holds the input, the result, the expected result and the chunks in flight. 1 GiB is
# past what a link floor needs and below what a GPU node can spare for a moment.
COLLECTIVE_MEMORY_FACTOR = 4
DEFAULT_COLLECTIVE_SIZE_MIB = 64
MAX_COLLECTIVE_SIZE_MIB = 1024
DEFAULT_COLLECTIVE_TIMEOUT_SECONDS = 60
MIN_COLLECTIVE_TIMEOUT_SECONDS = 5
MAX_COLLECTIVE_TIMEOUT_SECONDS = 600


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
    # The node's inbound and outbound ring links both measured below collectiveBandwidth.minGbps.
    COLLECTIVE_BANDWIDTH_LOW = "CollectiveBandwidthLow"
    # The ring all-reduce finished, but the node's reduced buffer has the wrong checksum.
    COLLECTIVE_RESULT_WRONG = "CollectiveResultWrong"


class CollectiveBandwidthSpec(ApiModel):
    """A short ring all-reduce over TCP between the job's pods, in their preflights, before training."""

    # Kubernetes' schema spells an exclusive bound as minimum plus exclusiveMinimum: true (api/progress.py).
    min_gbps: float = Field(
        gt=0, le=10000, json_schema_extra={"minimum": 0, "exclusiveMinimum": True},
        description="Floor, in Gbit/s, for each ring link between two pods. A node whose inbound and outbound "
                    "links are both below it fails with CollectiveBandwidthLow; its neighbours, which see only "
                    "one slow link each, pass.")
    size_mib: int = Field(
        DEFAULT_COLLECTIVE_SIZE_MIB, alias="sizeMiB", ge=1, le=MAX_COLLECTIVE_SIZE_MIB,
        description="Size of the all-reduced buffer in MiB; each link also carries this much alone to measure "
                    f"its rate. The preflight's memory limit grows by {COLLECTIVE_MEMORY_FACTOR} times this.")
    timeout_seconds: int = Field(
        DEFAULT_COLLECTIVE_TIMEOUT_SECONDS, ge=MIN_COLLECTIVE_TIMEOUT_SECONDS, le=MAX_COLLECTIVE_TIMEOUT_SECONDS,
        description="Time for the whole test after every peer's DNS name resolves: the ring connecting, the "
                    "link rates and the all-reduce. A peer that has not connected by then fails the preflight "
                    "with CollectivePeerUnreachable.")


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
    collective_bandwidth: CollectiveBandwidthSpec | None = Field(
        None, description="When set, the preflights of an attempt run a ring all-reduce across the nodes once "
                          "every peer resolves, and fail a node whose ring links are both slower than minGbps. "
                          "Off unless set.")


class BandwidthFigures(StatusModel):
    """What a node measured in the collective bandwidth test, in Gbit/s (nccl-tests' GB/s times 8)."""

    model_config = ConfigDict(frozen=True)

    inbound_gbps: float = Field(ge=0, description="Rate of the ring link from the previous node into this one.")
    outbound_gbps: float = Field(ge=0, description="Rate of the ring link from this node to the next one.")
    algbw_gbps: float | None = Field(
        None, ge=0, description="All-reduce algorithm bandwidth: buffer size / time. Absent when the all-reduce "
                                "was skipped because a node's links were too slow.")
    busbw_gbps: float | None = Field(
        None, ge=0, description="All-reduce bus bandwidth, algbw * 2(n-1)/n as nccl-tests define it: comparable "
                                "to a link's rate whatever the node count.")


class NodeHealth(StatusModel):
    """A node's health verdict, from its preflight's termination message."""

    # Frozen (hashable): the controller's observed pod records, which hold one, are frozen dataclasses.
    model_config = ConfigDict(frozen=True)

    status: HealthStatus = Field(description="Passed or Failed.")
    reason: str = Field(max_length=128, description="CamelCase: Healthy, GPUsNotVisible, RDMADevicesMissing, "
                                                    "MemlockTooLow, ShmTooSmall, CollectiveBandwidthLow or "
                                                    "CollectiveResultWrong.")
    message: str | None = Field(None, max_length=MAX_HEALTH_MESSAGE,
                                description="What was found; in status.nodeStatuses only when it failed.")
    bandwidth: BandwidthFigures | None = Field(
        None, description="The collective bandwidth test's figures (healthCheck.collectiveBandwidth), passed or not.")


class ExcludedNode(StatusModel):
    """A node the job's next attempts stay off, until `until`."""

    node: str = Field(max_length=253, description="Kubernetes node name.")
    reason: str = Field(max_length=128, description="Why, CamelCase (e.g. GPUsNotVisible).")
    message: str = Field("", max_length=MAX_HEALTH_MESSAGE, description="What the check found.")
    until: str = Field(description="RFC3339 time the exclusion ends.", json_schema_extra={"format": "date-time"})


def health_message(status: HealthStatus, reason: str, message: str,
                   bandwidth: BandwidthFigures | None = None) -> str:
    """The termination message of a preflight that ran the health check."""
    data: dict[str, Any] = {HEALTH_KEY: status.value, "reason": reason, "message": message[:MAX_HEALTH_MESSAGE]}
    if bandwidth is not None:
        data["bandwidth"] = bandwidth.model_dump(by_alias=True, exclude_none=True)
    return json.dumps(data)


def parse_health_message(text: str | None) -> NodeHealth | None:
    """The verdict in a termination message; None when it holds none (plain text, or garbage)."""
    if not text or not text.lstrip().startswith("{"):
        return None
    try:
        data: Any = json.loads(text)
        bandwidth = data.get("bandwidth")
        return NodeHealth(status=HealthStatus(data[HEALTH_KEY]), reason=str(data["reason"])[:128],
                          message=str(data.get("message") or "")[:MAX_HEALTH_MESSAGE] or None,
                          bandwidth=BandwidthFigures.model_validate(bandwidth) if bandwidth is not None else None)
    except (ValueError, KeyError, TypeError):
        return None
