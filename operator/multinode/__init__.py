"""multinode: a Kubernetes operator for multi-node GPU training jobs."""

__version__ = "0.1.0"
