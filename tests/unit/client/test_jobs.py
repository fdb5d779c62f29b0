"""What the client sends and reads, without a cluster: bodies from models and YAML files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from multinode.api import TrainingJob, TrainingJobSpec
from multinode.client.jobs import TrainingJobClient, job_body, load_yaml, parse_job
from tests.support.examples import DOC_MANIFESTS, Manifest
from tests.support.paths import REPO


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


GPU_TYPO = ("apiVersion: multinode.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: a}\n"
            "spec: {numNodes: 2, image: i, resourcesPerNode: {gpu: 8}}\n")


class RecordingKube:
    """What TrainingJobClient calls of the Kubernetes wrapper, answered from a dict; each create is recorded."""

    default_namespace = "ml"

    def __init__(self, stored: dict[str, Any] | None = None):
        self.stored, self.created = stored, []

    def create_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append((namespace, body))
        return {**body, "metadata": {**body["metadata"], "namespace": namespace, "uid": "u1"}}

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        assert self.stored is not None
        return self.stored


def assert_names_the_gpu_typo(refused: pytest.ExceptionInfo[pydantic.ValidationError]) -> None:
    [error] = refused.value.errors()
    assert (error["type"], error["loc"]) == ("extra_forbidden", ("spec", "resourcesPerNode", "gpu"))
    assert "spec.resourcesPerNode.gpu\n  Extra inputs are not permitted" in str(refused.value)


def test_a_misspelt_field_in_a_yaml_file_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(GPU_TYPO)
    with pytest.raises(pydantic.ValidationError) as refused:
        load_yaml(path)
    assert_names_the_gpu_typo(refused)
    with pytest.raises(pydantic.ValidationError) as refused:
        parse_job(yaml.safe_load(GPU_TYPO))
    assert_names_the_gpu_typo(refused)


def test_create_refuses_a_misspelt_field_before_calling_the_apiserver(tmp_path: Path) -> None:
    kube = RecordingKube()
    jobs = TrainingJobClient(kube=kube)  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError) as refused:
        jobs.create(yaml.safe_load(GPU_TYPO))
    assert_names_the_gpu_typo(refused)
    (tmp_path / "job.yaml").write_text(GPU_TYPO)
    with pytest.raises(pydantic.ValidationError) as refused:
        jobs.create_from_yaml(tmp_path / "job.yaml")
    assert_names_the_gpu_typo(refused)
    with pytest.raises(pydantic.ValidationError, match=r"resources_per_node\.gpu\n  Extra inputs are not permitted"):
        TrainingJobSpec(num_nodes=2, image="i", resources_per_node={"gpu": 8})
    assert kube.created == []
    # Spelt right, the dict is sent as written.
    created = jobs.create(yaml.safe_load(GPU_TYPO.replace("{gpu: 8}", "{gpus: 8}")))
    assert created.spec.resources_per_node.gpus == 8
    assert kube.created[0][1]["spec"]["resourcesPerNode"] == {"gpus": 8}


def test_a_stored_job_with_fields_of_a_newer_crd_is_read_without_them() -> None:
    stored = yaml.safe_load(GPU_TYPO.replace("{gpu: 8}", "{gpus: 8, partition: 1g}"))
    stored["metadata"]["namespace"] = "ml"
    stored["status"] = {"phase": "Running", "laterStatusField": 1}
    job = TrainingJobClient(kube=RecordingKube(stored)).get("a")  # type: ignore[arg-type]
    assert job.spec.resources_per_node.gpus == 8
    assert job.status is not None and job.status.phase == "Running"


EXAMPLES = sorted((REPO / "examples").rglob("*.yaml"))
DOC_JOBS = [m for m in DOC_MANIFESTS if m.is_training_job]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_training_job_loads(path: Path) -> None:
    jobs = load_yaml(path)
    assert len(jobs) == sum(1 for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "TrainingJob")


@pytest.mark.parametrize("manifest", DOC_JOBS, ids=lambda m: m.id)
def test_every_training_job_in_the_docs_parses(manifest: Manifest) -> None:
    assert parse_job(manifest.obj).metadata.name == manifest.obj["metadata"]["name"]


def test_the_examples_and_docs_hold_enough_jobs_to_mean_something() -> None:
    assert len(EXAMPLES) >= 10 and len(DOC_JOBS) > 10
