"""What the client sends and reads, without a cluster: bodies from models and YAML files."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from multinode.api import TrainingJob, TrainingJobSpec
from multinode.client.jobs import job_body, load_yaml


def test_a_model_is_sent_camel_case_with_only_what_was_set() -> None:
    job = TrainingJob(metadata={"name": "llama"}, spec=TrainingJobSpec(num_nodes=4, image="img:1",
                                                                       resources_per_node={"gpus": 8}))
    assert job_body(job) == {"apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob",
                             "metadata": {"name": "llama"},
                             "spec": {"numNodes": 4, "image": "img:1", "resourcesPerNode": {"gpus": 8}}}


def test_a_dict_is_sent_as_given_without_its_status() -> None:
    body = {"metadata": {"name": "x"}, "spec": {"numNodes": 1, "image": "i"}, "status": {"phase": "Running"}}
    assert job_body(body) == {"apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob",
                              "metadata": {"name": "x"}, "spec": {"numNodes": 1, "image": "i"}}


def test_every_training_job_of_a_yaml_file_is_read_and_validated(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n"
                    "apiVersion: multinode.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: a}\n"
                    "spec: {numNodes: 2, image: i}\n---\n")
    [job] = load_yaml(path)
    assert job.metadata.name == "a" and job.spec.num_nodes == 2
    path.write_text("kind: TrainingJob\nmetadata: {name: a}\nspec: {numNodes: 0, image: i}\n")
    with pytest.raises(pydantic.ValidationError, match=r"numNodes|num_nodes"):
        load_yaml(path)
