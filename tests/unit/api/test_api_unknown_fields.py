"""Unknown keys: the spec models refuse one wherever the CRD would prune it, naming where it is; they keep
it where the CRD keeps it (Kubernetes shapes passed to pods); the status models skip it. read_stored_job
reads what a newer CRD stored, leaving its new fields out by name."""

from __future__ import annotations

import copy
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from crd_schema_walk import PRESERVE, prune
from pydantic import BaseModel, ValidationError

from multinode.api import TrainingJob, TrainingJobSpec, TrainingJobStatus, Volume, read_stored_job
from multinode.api.pod_fields import Affinity, NodeAffinity, NodeSelector, NodeSelectorTerm, PodAntiAffinity
from multinode.api.crd import openapi_schema
from multinode.testing import full_job

UNKNOWN = "zzNotAField"
Loc = tuple[str | int, ...]


def object_nodes(value: Any, schema: dict[str, Any], loc: Loc = ()) -> Iterator[tuple[Loc, bool]]:
    """Where `value` has an object the CRD declares, and whether the CRD keeps unknown keys there."""
    if isinstance(value, dict) and schema.get("type") == "object":
        keeps = bool(schema.get(PRESERVE))
        if "properties" in schema or keeps:
            yield loc, keeps
        if keeps:
            return  # a Kubernetes shape passed through as is: nothing below it is modelled
        for key, item in value.items():
            if key in schema.get("properties", {}):
                yield from object_nodes(item, schema["properties"][key], (*loc, key))
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            yield from object_nodes(item, schema["items"], (*loc, index))


def with_unknown(loc: Loc) -> dict[str, Any]:
    job = full_job()
    node: Any = job
    for part in loc:
        node = node[part]
    node[UNKNOWN] = {"x": 1}
    return job


# The apiserver does not prune metadata (ObjectMeta is its own), so neither do the models.
NODES = [(loc, keeps) for loc, keeps in object_nodes(full_job(), openapi_schema())
         if loc[:1] != ("metadata",)]
SPEC_NODES = [(loc, keeps) for loc, keeps in NODES if loc[:1] in ((), ("spec",))]
STATUS_NODES = [loc for loc, _ in NODES if loc[:1] == ("status",)]


def dotted(loc: Loc) -> str:
    return ".".join(str(part) for part in loc) or "(root)"


def node_id(value: object) -> str:
    return dotted(value) if isinstance(value, tuple) else ("kept" if value else "pruned")


def models_under(model: type[BaseModel]) -> set[type[BaseModel]]:
    """The model and every model its fields hold, however nested (lists, optionals)."""
    found, todo = set(), [model]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.add(current)
        for field in current.model_fields.values():
            types, args = [], [field.annotation]
            while args:
                arg = args.pop()
                types.append(arg)
                args += typing.get_args(arg)
            todo += [t for t in types if isinstance(t, type) and issubclass(t, BaseModel)]
    return found


def test_every_spec_model_forbids_unknown_keys_and_every_status_model_skips_them() -> None:
    """Each class, also those the full example leaves out (spec.scheduling.volcano, ...)."""
    spec, status = models_under(TrainingJobSpec), models_under(TrainingJobStatus)
    assert not spec & status
    # Kubernetes shapes passed through to the pods keep what they do not model: a core/v1 volume source, and
    # the Affinity, typed only down to the lists the operator adds its terms to.
    passed_through = {Volume, Affinity, NodeAffinity, NodeSelector, NodeSelectorTerm, PodAntiAffinity}
    assert passed_through <= spec
    assert {m.__name__: m.model_config.get("extra") for m in spec - passed_through} == {
        m.__name__: "forbid" for m in spec - passed_through}
    assert {m.model_config.get("extra") for m in passed_through} == {"allow"}
    assert {m.model_config.get("extra") for m in status} == {"ignore"}
    assert TrainingJob.model_config.get("extra") == "forbid"


def test_the_example_reaches_the_objects_that_matter() -> None:
    locs = {dotted(loc) for loc, _ in NODES}
    assert {"(root)", "spec", "spec.resourcesPerNode", "spec.podTemplate.tolerations.0", "spec.env.0",
            "spec.podTemplate.volumes.0", "spec.podTemplate.affinity", "spec.env.1.valueFrom",
            "status", "status.nodeStatuses.0"} <= locs
    assert len(SPEC_NODES) > 25 and len(STATUS_NODES) > 10


@pytest.mark.parametrize(("loc", "keeps"), SPEC_NODES, ids=node_id)
def test_a_spec_refuses_an_unknown_key_by_name_exactly_where_the_crd_prunes_it(loc: Loc, keeps: bool) -> None:
    job = with_unknown(loc)
    if keeps:  # podTemplate.volumes[], affinity, env[].valueFrom: the Kubernetes fields of a pod pass through
        TrainingJob.model_validate(job)
        return
    with pytest.raises(ValidationError) as refused:
        TrainingJob.model_validate(job)
    [error] = refused.value.errors()
    assert (error["type"], error["loc"]) == ("extra_forbidden", (*loc, UNKNOWN))
    assert f"{dotted((*loc, UNKNOWN))}\n  Extra inputs are not permitted" in str(refused.value)
    # What the apiserver stores after pruning (metadata aside: its own rules) validates: a job it accepted never
    # fails the operator.
    stored = {**prune(job, openapi_schema()), "metadata": job["metadata"]}
    assert TrainingJob.model_validate(stored) == TrainingJob.model_validate(full_job())


@pytest.mark.parametrize("loc", STATUS_NODES, ids=dotted)
def test_a_status_skips_an_unknown_key(loc: Loc) -> None:
    """A status written by a newer operator is read by an older one after a downgrade: never an error."""
    assert TrainingJob.model_validate(with_unknown(loc)) == TrainingJob.model_validate(full_job())


def test_the_gpu_typo_is_refused_not_read_as_a_cpu_only_job() -> None:
    job = full_job()
    job["spec"]["resourcesPerNode"] = {"gpu": 8}
    with pytest.raises(ValidationError, match=r"spec\.resourcesPerNode\.gpu\n  Extra inputs are not permitted"):
        TrainingJob.model_validate(job)


def test_a_stored_job_from_a_newer_crd_is_read_without_its_new_fields_which_are_named() -> None:
    job = full_job()
    job["spec"]["resourcesPerNode"]["gpuPartition"] = "1g.10gb"
    job["spec"]["env"][0]["newOption"] = True
    job["spec"]["laterFeature"] = {"enabled": True}
    read, unknown = read_stored_job(job)
    assert sorted(unknown) == ["spec.env[0].newOption", "spec.laterFeature", "spec.resourcesPerNode.gpuPartition"]
    assert read == TrainingJob.model_validate(full_job())
    assert "laterFeature" in job["spec"], "the object given is not changed"


def test_reading_a_stored_job_still_refuses_a_bad_value() -> None:
    job = copy.deepcopy(full_job())
    job["spec"]["numNodes"] = 0
    job["spec"]["laterFeature"] = True
    with pytest.raises(ValidationError, match="numNodes"):
        read_stored_job(job)
    assert read_stored_job(full_job()) == (TrainingJob.model_validate(full_job()), ())
