"""Excluded nodes' affinity (node_exclusion.py) on the node pod: one NotIn per machine, in every term of the
user's required node affinity, the user's object unchanged."""

from __future__ import annotations

from multinode.render import render_node_pod
from multinode.render.node_exclusion import exclude_nodes
from multinode.render.pod import one_pod_per_node
from multinode.testing import stored_job


OTHER_TRAINERS = {"labelSelector": {"matchLabels": {"app": "other"}}, "topologyKey": "kubernetes.io/hostname"}


def test_excluded_nodes_without_a_user_affinity() -> None:
    pod = render_node_pod(stored_job(2), 0, 1, excluded_nodes=["gpu-9", "gpu-3"])
    one_each = [{"key": "metadata.name", "operator": "NotIn", "values": [node]} for node in ("gpu-3", "gpu-9")]
    assert pod["spec"]["affinity"]["nodeAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": one_each}]}}, \
        "one NotIn per node: the apiserver refuses more than one value in a node field selector's NotIn"


def test_excluded_nodes_join_every_term_of_the_users_affinity_and_leave_it_unchanged() -> None:
    user = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1", "gpu-9"]}]}]},
             "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]},
            "podAntiAffinity": {"x": 1, "requiredDuringSchedulingIgnoredDuringExecution": [OTHER_TRAINERS]}}
    job = stored_job(2, podTemplate={"affinity": user})
    before = job.model_dump()
    affinity = render_node_pod(job, 0, 1, excluded_nodes=["gpu-9"])["spec"]["affinity"]

    not_in = {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-9"]}
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    pool_a = [{"key": "pool", "operator": "In", "values": ["a"]}]
    assert terms == [{"matchExpressions": pool_a, "matchFields": [not_in]},
                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1", "gpu-9"]},
                                      not_in]}]
    # The user's pod anti-affinity keeps its own terms; one pod per node joins them.
    assert affinity["podAntiAffinity"] == {"x": 1, "requiredDuringSchedulingIgnoredDuringExecution": [
        OTHER_TRAINERS, one_pod_per_node("llama", 1)]}
    assert affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 1,
                                                                                             "preference": {}}]
    assert job.model_dump() == before


def test_no_excluded_nodes_keep_the_affinity_as_is() -> None:
    assert exclude_nodes(None, []) is None
    assert exclude_nodes({"podAffinity": {}}, []) == {"podAffinity": {}}
