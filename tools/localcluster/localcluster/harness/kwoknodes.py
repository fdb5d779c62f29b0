"""A kwok node that fails: kwok's node-not-ready chaos stage turns its Ready condition False, as a kubelet
reports a node that cannot run pods, and the control plane reacts as it would (the not-ready taint).

Tried first and not used: changing the node's kwok.x-k8s.io/node annotation so that kwok would let go of
it and stop renewing its lease (a dead kubelet). With kwok v0.8.0 on a stock-timings cluster the gang on
it was not restarted within 180 s, so the node evidently kept its heartbeat (not investigated further).
A really dead kubelet is the real-node lane's (LocalCluster.kill_real_node, tests/integration/realnodes/
test_node_loss.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from kubernetes import client

NOT_READY_STAGE = "node-not-ready.stage.kwok.x-k8s.io"


def ready_status(core: client.CoreV1Api, name: str) -> str | None:
    conditions = core.read_node(name).status.conditions or []
    return next((c.status for c in conditions if c.type == "Ready"), None)


def fail_nodes(core: client.CoreV1Api, names: Iterable[str]) -> None:
    """Every node in `names` turns NotReady (kwok applies the stage within about a second)."""
    for name in names:
        core.patch_node(name, {"metadata": {"labels": {NOT_READY_STAGE: "true"}}})


def clear_failure(core: client.CoreV1Api, names: Iterable[str]) -> None:
    """Take the stage's label off again (the node's status is kwok's to restore, or not)."""
    for name in names:
        core.patch_node(name, {"metadata": {"labels": {NOT_READY_STAGE: None}}})
