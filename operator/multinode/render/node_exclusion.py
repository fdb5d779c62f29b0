"""A node affinity that keeps a pod off machines named: a new attempt's node pods off status.excludedNodes
(pod.py), an elastic job's rendezvous store off its gang's machines (rendezvous_store.py)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

# Nodes are excluded by name through matchFields: the kubernetes.io/hostname label is not always the
# node's name (cloud providers), metadata.name is.
NODE_NAME_FIELD = "metadata.name"


def exclude_nodes(affinity: dict[str, Any] | None, nodes: Sequence[str]) -> dict[str, Any] | None:
    """The user's affinity with every required node selector term also requiring a node not in `nodes`
    (by name).

    Terms of requiredDuringScheduling...nodeSelectorTerms are ORed, so the NotIns go into each of them;
    with no required terms they become the only one. One NotIn per node: the apiserver takes a single value in
    a node field selector's In or NotIn. The user's object is not changed.
    """
    if not nodes:
        return affinity
    merged: dict[str, Any] = copy.deepcopy(affinity) if affinity else {}
    not_in = [{"key": NODE_NAME_FIELD, "operator": "NotIn", "values": [node]} for node in sorted(set(nodes))]
    node_affinity = merged.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchFields"] = [*(term.get("matchFields") or []), *copy.deepcopy(not_in)]
    required["nodeSelectorTerms"] = terms
    return merged
