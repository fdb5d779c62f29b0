from __future__ import annotations

import pytest
from multinode.testing import stored_job

from multinode.api import TrainingJob
from multinode.render import node_dns_name, node_hostname, owner_reference, pod_name
from multinode.render.names import check_node, job_identity


def test_pod_name_carries_index_and_attempt() -> None:
    assert pod_name("llama", 3, 0) == "llama-3-a0"
    assert pod_name("llama", 0, 12) == "llama-0-a12"


def test_hostname_is_stable_across_attempts() -> None:
    assert node_hostname("llama", 3) == "llama-3"


def test_dns_name_goes_through_the_headless_service() -> None:
    assert node_dns_name(stored_job(), 1) == "llama-1.llama.ml.svc"


def test_owner_reference_makes_the_job_the_controller() -> None:
    assert owner_reference(stored_job()) == {
        "apiVersion": "multinode.dev/v1alpha1",
        "kind": "TrainingJob",
        "name": "llama",
        "uid": "uid-123",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_rendering_needs_name_namespace_and_uid() -> None:
    job = TrainingJob.model_validate(
        {"metadata": {"name": "llama"}, "spec": {"numNodes": 1, "image": "img"}}
    )
    with pytest.raises(ValueError, match="namespace, uid"):
        job_identity(job)


@pytest.mark.parametrize(("index", "attempt"), [(-1, 0), (2, 0), (0, -1)])
def test_check_node_rejects_out_of_range(index: int, attempt: int) -> None:
    with pytest.raises(ValueError):
        check_node(stored_job(num_nodes=2), index, attempt)
