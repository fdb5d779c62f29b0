"""Keys of the pod index beside (namespace, job) (handlers.py fills it, worker.py reads it)."""

from __future__ import annotations


def mirror_key(namespace: str, job: str) -> tuple[str, str, str]:
    """The pod index holds node pods under (namespace, job) and a job's mirror pod under this key."""
    return (namespace, job, "mirror")


def node_jobs_key(node: str) -> tuple[str, str, str]:
    """...and under this key the (namespace, job) of every node pod bound to `node` (no namespace is
    named ""): a node's Ready change finds the jobs it concerns without walking every pod."""
    return ("", "node", node)
