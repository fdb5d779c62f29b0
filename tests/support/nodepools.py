"""Fake nodes of a test's own (a pool with its own label), Ready, removed again when the test ends: for
tests that fail a node, so the shared session cluster's nodes stay as they were.

The pool's nodes are tainted from their creation: a job of another test running at the same time (xdist)
must not land on nodes this test fails or deletes. The test's own jobs go there with `on_pool(prefix)`."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from kubernetes import client
from localcluster import LocalCluster, NodePoolConfig
from localcluster.nodes import POOL_LABEL

from localcluster.harness.waiting import wait_for


def _ready(core: client.CoreV1Api, name: str) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in core.read_node(name).status.conditions or [])


class Pool(NamedTuple):
    prefix: str        # the value of the pool label (localcluster.nodes.POOL_LABEL) and the names' prefix
    names: list[str]


def pool_taint(prefix: str) -> dict[str, str]:
    """The taint of the pool `prefix`'s nodes."""
    return {"key": POOL_LABEL, "value": prefix, "effect": "NoSchedule"}


def on_pool(prefix: str, tolerations: list[dict] | None = None) -> dict:
    """A TrainingJob's podTemplate that places its pods on the pool `prefix` (and tolerates its taint), with
    `tolerations` of the test's own besides."""
    return {"nodeSelector": {POOL_LABEL: prefix},
            "tolerations": [{**pool_taint(prefix), "operator": "Equal"}, *(tolerations or [])]}


@contextmanager
def own_pool(cluster: LocalCluster, core: client.CoreV1Api, purpose: str, count: int = 3,
             **config: Any) -> Iterator[Pool]:
    """`count` Ready nodes of a pool of their own (`<purpose>-<random>`), tainted for it; deleted afterwards.
    `config`: more of the pool's NodePoolConfig (declared_features=() for nodes of kubelets older than 1.36)."""
    prefix = f"{purpose}-{uuid.uuid4().hex[:6]}"
    names = cluster.create_nodes(NodePoolConfig(count=count, name_prefix=prefix, taints=(pool_taint(prefix),),
                                                **config))
    try:
        wait_for(lambda: all(_ready(core, n) for n in names), timeout=60, what="pool Ready")
        yield Pool(prefix, names)
    finally:
        for name in names:
            core.delete_node(name)
