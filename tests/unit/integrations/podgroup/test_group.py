"""The attempt's native PodGroup and the pod's membership (integrations/podgroup/, render/attempt_group.py)."""

from __future__ import annotations

import re

import pytest

from multinode.api.base import LABEL_VALUE_PATTERN
from multinode.integrations.podgroup import NativePodGroup, render_pod_group
from multinode.render import pod_group_name, render_node_pod
from multinode.testing import stored_job


def test_the_pod_group_is_a_gang_of_num_nodes_owned_by_the_job_and_labelled_with_its_attempt() -> None:
    group = render_pod_group(stored_job(5), attempt=2)
    assert group["apiVersion"] == "scheduling.k8s.io/v1alpha2" and group["kind"] == "PodGroup"
    assert group["metadata"]["name"] == "llama-a2" and group["metadata"]["namespace"] == "ml"
    assert group["metadata"]["labels"]["multinode.dev/job-name"] == "llama"
    assert group["metadata"]["labels"]["multinode.dev/attempt"] == "2"
    [owner] = group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "TrainingJob", "llama", "uid-123", True)
    # Only what the API (k8s.io/api v0.36 PodGroupSpec) needs: no template reference, no constraints.
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 5}}, "disruptionMode": "PodGroup"}


def test_a_pod_joins_its_group_only_when_told() -> None:
    job = stored_job(2)
    keys = NativePodGroup().pod_keys(job, 0, "llama-a0")
    assert render_node_pod(job, 1, 0, keys=keys)["spec"]["schedulingGroup"] == {"podGroupName": "llama-a0"}
    assert "schedulingGroup" not in render_node_pod(job, 1, 0, keys=NativePodGroup().pod_keys(job, 0, None))["spec"]


def test_a_negative_attempt_names_no_group() -> None:
    with pytest.raises(ValueError):
        pod_group_name("llama", -1)


def test_the_pods_priority_class_is_the_group_s_and_topology_its_constraint() -> None:
    job = stored_job(2, podTemplate={"priorityClassName": "training-high"}, topology={"sameDomainLabel": "block"})
    spec = render_pod_group(job, attempt=0)["spec"]
    assert spec["priorityClassName"] == "training-high"
    assert spec["schedulingConstraints"] == {"topology": [{"key": "block"}]}


def test_a_long_job_name_gives_a_group_name_that_is_still_a_label_value() -> None:
    """Coscheduling joins pods by the label scheduling.x-k8s.io/pod-group = the group's name: 63 characters at
    most, however long the job's name (up to 63) and the attempt."""
    long = "a" * 55 + "-b-c-d-e"  # 63 characters, and a '-' where the name is cut
    names = {pod_group_name(long, attempt) for attempt in (0, 7, 123456)}
    assert len(names) == 3
    for name in names:
        assert len(name) <= 63 and re.fullmatch(LABEL_VALUE_PATTERN, name) and name.startswith("a" * 40), name
    other = pod_group_name("a" * 55 + "-b-c-d-x", 0)
    assert other != pod_group_name(long, 0)  # same start, another job: another group
    assert pod_group_name("a" * 58, 12) == "a" * 58 + "-a12"  # 63: unchanged
