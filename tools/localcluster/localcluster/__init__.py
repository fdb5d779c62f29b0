"""A real local Kubernetes control plane with kwok-simulated GPU nodes, for tests and the demo.

Everything here is development tooling: it is not part of the operator package.
"""

from localcluster.cluster import ClusterConfig, LocalCluster
from localcluster.nodes import NodePoolConfig

__all__ = ["ClusterConfig", "LocalCluster", "NodePoolConfig"]
