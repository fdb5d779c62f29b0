"""spec.podGroup (deprecated, integrations/pod_group_labels/): an out-of-tree gang scheduler's keys on every pod,
no group made by the operator."""

from __future__ import annotations

import pytest

from multinode.api.status import GangMode
from multinode.integrations.pod_group_labels import MIN_MEMBER_ANNOTATION, PodGroupLabels
from multinode.testing import stored_job
from tests.unit.reconcile.planning import run


@pytest.mark.parametrize(("pod_group", "min_member"), [({}, "3"), ({"minMember": 2}, "2")])
def test_every_pod_carries_the_keys_both_schedulers_read_and_no_group_is_made(pod_group, min_member) -> None:
    result = run(stored_job(3, podGroup=pod_group), [], gang_api=True)
    assert result.objects_to_create == [] and result.status.scheduling is not None
    assert result.status.scheduling.gang == GangMode.EXTERNAL
    for pod in result.pods_to_create:
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "llama"
        annotations = pod["metadata"]["annotations"]
        assert annotations["scheduling.k8s.io/group-name"] == "llama"
        assert annotations[MIN_MEMBER_ANNOTATION] == min_member


def test_a_job_without_spec_pod_group_gets_none_of_its_keys() -> None:
    keys = PodGroupLabels().pod_keys(stored_job(2), 0, None)
    assert (dict(keys.labels), dict(keys.annotations), keys.scheduler_name) == ({}, {}, None)
