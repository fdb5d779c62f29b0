"""Addresses and names of a real-node cluster: one source for every component that needs them.

The apiserver, each node and the cluster DNS get /32 addresses on `lo` (10.243.0.0/24 and 10.96.0.10), so
pods reach them through their bridge's gateway and the `kubernetes` Service points at an address a pod can
route to. Each real node has a CNI bridge with its own /24 of the pod range. kwok's fake pod IPs come from
another range, so a headless record never names a fake pod with a real pod's address.
"""

from __future__ import annotations

API_ADDRESS = "10.243.0.1"
NODE_ADDRESS_RANGE = "10.243.0.0/24"
SERVICE_RANGE = "10.96.0.0/16"
SERVICE_API_ADDRESS = "10.96.0.1"
DNS_ADDRESS = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
POD_RANGE = "10.244.0.0/16"
KWOK_POD_RANGE = "10.245.0.0/16"
KUBELET_PORT = 10250
# Pods on real nodes may reach each other, the node addresses and the service range, nothing beyond.
REAL_NODE_LABEL = "localcluster.multinode.dev/real-node"
# Real nodes take only pods that ask for them: kwok-lane jobs in a mixed cluster never land on a node
# that would really try to run them.
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
REAL_NODE_TOLERATION = {"key": REAL_NODE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def node_address(index: int) -> str:
    return f"10.243.0.{11 + index}"


def pod_subnet(index: int) -> str:
    return f"10.244.{index + 1}.0/24"


def bridge_name(index: int) -> str:
    return f"mnbr{index}"  # at most 15 characters, like every link name
