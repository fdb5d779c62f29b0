"""How the nodes of a job reach each other: the rendezvous port, host networking, Multus, RDMA and NCCL."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from multinode.api.base import MAX_NAME_LENGTH, QUALIFIED_NAME_PATTERN, ApiModel
from multinode.api.constants import DEFAULT_RDMA_RESOURCE_NAME, DEFAULT_RENDEZVOUS_PORT, RENDEZVOUS_PORT_SPAN

# The operator joins these with commas into the Multus annotation, so no commas here.
MultusNetworkName = Annotated[
    str, Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=r"^[^,\s]+$")
]


class RdmaSpec(ApiModel):
    """RDMA devices per node; setting this also grants the IPC_LOCK capability (unless ipcLock is false)."""

    resource_name: str = Field(
        DEFAULT_RDMA_RESOURCE_NAME,
        max_length=MAX_NAME_LENGTH,
        pattern=QUALIFIED_NAME_PATTERN,
        description=(
            "Device plugin resource, for example rdma/hca_shared_devices_a, rdma/shared_ib "
            "or nvidia.com/mlnxnics; it differs per cluster."
        ),
    )
    count: int = Field(1, ge=1, description="Number of RDMA devices per node.")
    ipc_lock: bool = Field(
        True,
        description="Add the IPC_LOCK capability to the trainer (and to the preflight's RDMA check), so RDMA can "
                    "pin memory past RLIMIT_MEMLOCK. Pod Security `baseline` refuses it: set false where the nodes' "
                    "runtime gives containers an unlimited memlock limit (containerd's LimitMEMLOCK=infinity); "
                    "the preflight's memlock check then confirms the limit.",
    )


class NcclSpec(ApiModel):
    """NCCL settings, passed to the trainer as NCCL_* environment variables."""

    socket_ifname: str | None = Field(
        None, max_length=256, description="NCCL_SOCKET_IFNAME, for example net1 with Multus."
    )
    ib_hca: str | None = Field(
        None,
        max_length=1024,
        description="NCCL_IB_HCA, for example =mlx5_0,mlx5_1 (a leading = means exact names).",
    )
    debug: Literal["VERSION", "WARN", "INFO", "TRACE"] | None = Field(
        None, description="NCCL_DEBUG level; INFO or TRACE only while debugging."
    )
    debug_subsys: str | None = Field(
        None, max_length=256, description="NCCL_DEBUG_SUBSYS, for example INIT,NET."
    )


class NetworkSpec(ApiModel):
    """How nodes reach each other."""

    rendezvous_port: int = Field(
        DEFAULT_RENDEZVOUS_PORT,
        ge=1,
        le=65535,
        description=f"Base of the {RENDEZVOUS_PORT_SPAN} rendezvous ports on node 0: attempt k uses this + k mod "
                    f"{RENDEZVOUS_PORT_SPAN} as MASTER_PORT (counted down from it instead near 65535), so a pod of an "
                    "earlier attempt never reaches the current one's.",
    )
    host_network: bool = Field(
        False,
        description=(
            "Run pods in the host network namespace (direct NIC access; pods see all host "
            "ports and interfaces)."
        ),
    )
    multus_networks: list[MultusNetworkName] | None = Field(
        None,
        max_length=16,
        description=(
            "Multus NetworkAttachmentDefinitions to attach to every pod, in order "
            "([<namespace>/]<name>[@<interface>]); the first usually appears as net1."
        ),
    )
    rdma: RdmaSpec | None = Field(None, description="Request RDMA devices; unset means none.")
    nccl: NcclSpec | None = Field(None, description="NCCL environment variables to set.")
