"""Fake GPU nodes that kwok keeps alive: what a GPU node of an InfiniBand cluster advertises."""

from __future__ import annotations

from dataclasses import dataclass, field

from multinode.render.in_place import IN_PLACE_NODE_FEATURE

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
POOL_LABEL = "localcluster.multinode.dev/pool"


@dataclass(frozen=True)
class NodePoolConfig:
    count: int = 8
    name_prefix: str = "gpu-node"
    gpus_per_node: int = 8
    gpu_resource_name: str = "nvidia.com/gpu"
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    rdma_resource_name: str = "rdma/hca_shared_devices_a"
    rdma_per_node: int = 1
    cpu: str = "96"
    memory: str = "1Ti"
    max_pods: int = 110
    zones: tuple[str, ...] = ("zone-a", "zone-b")
    # Nodes are grouped into fabric blocks of this many consecutive nodes, like an IB leaf switch.
    nodes_per_block: int = 4
    block_label: str = "network.topology.nvidia.com/block"
    extra_labels: dict[str, str] = field(default_factory=dict)
    # Node taints ({"key", "value", "effect"}), there from the node's creation on.
    taints: tuple[dict[str, str], ...] = ()
    # status.declaredFeatures of a kwok node: a 1.36 kubelet's by default; () for an older kubelet's node.
    declared_features: tuple[str, ...] = (IN_PLACE_NODE_FEATURE,)

    def __post_init__(self) -> None:
        if self.count < 0 or self.gpus_per_node < 0 or self.rdma_per_node < 0 or self.nodes_per_block < 1:
            raise ValueError(f"invalid node pool config: {self}")


def node_name(pool: NodePoolConfig, index: int) -> str:
    return f"{pool.name_prefix}-{index}"


def node_labels(pool: NodePoolConfig, index: int, kind: str) -> dict[str, str]:
    """The labels of a GPU node, kwok or real (`kind`): topology block, zone, GPU product and count."""
    labels = {
        "type": kind,
        POOL_LABEL: pool.name_prefix,
        "topology.kubernetes.io/zone": pool.zones[index % len(pool.zones)] if pool.zones else "",
        pool.block_label: f"block-{index // pool.nodes_per_block}",
    }
    if pool.gpus_per_node:
        labels["nvidia.com/gpu.product"] = pool.gpu_product
        labels["nvidia.com/gpu.count"] = str(pool.gpus_per_node)
    labels.update(pool.extra_labels)
    return {k: v for k, v in labels.items() if v}


def render_fake_gpu_node(pool: NodePoolConfig, index: int) -> dict:
    name = node_name(pool, index)
    capacity = {"cpu": pool.cpu, "memory": pool.memory, "pods": str(pool.max_pods), "ephemeral-storage": "2Ti"}
    if pool.gpus_per_node:
        capacity[pool.gpu_resource_name] = str(pool.gpus_per_node)
    if pool.rdma_per_node:
        capacity[pool.rdma_resource_name] = str(pool.rdma_per_node)
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              **node_labels(pool, index, "kwok")}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": labels,
        },
        "spec": {"taints": [dict(t) for t in pool.taints]} if pool.taints else {},
        # What a 1.36 kubelet declares with its default feature gates (NodeDeclaredFeatures,
        # k8s.io/component-helpers nodedeclaredfeatures): the scheduler places a pod whose container restart
        # rules restart all containers only on a node that declares IN_PLACE_NODE_FEATURE.
        "status": {"capacity": capacity, "allocatable": dict(capacity),
                   **({"declaredFeatures": list(pool.declared_features)} if pool.declared_features else {})},
    }
