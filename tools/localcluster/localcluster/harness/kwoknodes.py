"""A kwok node that dies as a machine would: it stops heartbeating, and the control plane finds out.

kwok keeps only the nodes whose annotation kwok.x-k8s.io/node is "fake" alive (cluster.py starts it with
that selector). Changing the annotation makes kwok let go of the node: its lease is no longer renewed and
nothing reports its status, exactly what a dead kubelet looks like from the control plane. Its pods stay
bound and, in the API, Running. Setting the annotation back brings it back.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubernetes import client

from localcluster.harness.waiting import wait_for
from localcluster.nodes import KWOK_ANNOTATION

MANAGED = "fake"
STOPPED = "stopped-by-test"


def ready_status(core: client.CoreV1Api, name: str) -> str | None:
    conditions = core.read_node(name).status.conditions or []
    return next((c.status for c in conditions if c.type == "Ready"), None)


def stop_heartbeats(core: client.CoreV1Api, names: Iterable[str]) -> None:
    """Every node in `names` stops heartbeating at once (as far as one PATCH each allows)."""
    for name in names:
        core.patch_node(name, {"metadata": {"annotations": {KWOK_ANNOTATION: STOPPED}}})


def resume_heartbeats(core: client.CoreV1Api, names: Iterable[str], *, timeout: float = 90) -> None:
    """kwok manages the nodes again; returns once each is Ready."""
    names = list(names)
    for name in names:
        core.patch_node(name, {"metadata": {"annotations": {KWOK_ANNOTATION: MANAGED}}})
    for name in names:
        wait_for(lambda: ready_status(core, name) == "True", timeout=timeout, what=f"node {name} Ready again")
