"""The generated CRD: matches the committed file, is structural, documented and bounded."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from crd_schema_walk import PRESERVE, apply_defaults, prune, value_paths, walk, walk_properties
from trainingjob_examples import minimal_trainingjob

from multinode.api import TrainingJob
from multinode.api.crd import render_crd, render_crd_yaml
from multinode.testing import full_job
from tests.support.paths import REPO

COMMITTED_CRD = REPO / "crds" / "trainingjobs.multinode.dev.yaml"


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return render_crd()


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_committed_crd_matches_the_models() -> None:
    assert COMMITTED_CRD.read_text() == render_crd_yaml(), (
        "crds/trainingjobs.multinode.dev.yaml is stale: run "
        "`python -m multinode.api.crd > crds/trainingjobs.multinode.dev.yaml`"
    )


def test_yaml_parses_back_to_the_rendered_dict(crd: dict[str, Any]) -> None:
    assert yaml.safe_load(render_crd_yaml()) == crd


def test_names_scope_and_subresources(crd: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == "trainingjobs.multinode.dev"
    spec = crd["spec"]
    assert spec["group"] == "multinode.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "TrainingJob"
    assert spec["names"]["plural"] == "trainingjobs"
    assert spec["names"]["shortNames"] == ["tj"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


def test_printer_columns(crd: dict[str, Any]) -> None:
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["type"], c["jsonPath"]) for c in columns] == [
        ("Phase", "string", ".status.phase"),
        ("Ready", "string", ".status.ready"),
        ("Restarts", "integer", ".status.restarts"),
        ("Last Checkpoint", "string", ".status.checkpoints.latest.name"),
        ("Step", "integer", ".status.progress.step"),
        ("Goodput %", "integer", ".status.goodput.percent"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ]


def test_schema_is_structural(schema: dict[str, Any]) -> None:
    forbidden = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "nullable"}
    for path, node in walk(schema):
        assert not forbidden & node.keys(), f"{path or '<root>'} has {forbidden & node.keys()}"
        assert "type" in node or node.get(PRESERVE), f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("default", "") is not None, f"{path} defaults to null"
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), f"{path} has no item schema"


def test_root_metadata_declares_only_name(schema: dict[str, Any]) -> None:
    # The apiserver rejects a CRD whose metadata schema says more than name/generateName
    # as plain strings; name is declared so the job name rule can carry fieldPath.
    metadata = schema["properties"]["metadata"]
    assert metadata["type"] == "object"
    assert set(metadata) == {"type", "properties"}
    assert set(metadata["properties"]) == {"name"}
    assert {k: v for k, v in metadata["properties"]["name"].items() if k != "description"} == {
        "type": "string"
    }
    assert schema["required"] == ["spec"]


def test_every_property_has_a_description_and_a_type(schema: dict[str, Any]) -> None:
    for path, node in walk_properties(schema):
        if path == ".metadata":
            continue
        assert node.get("description"), f"{path} has no description"
        assert node.get("type"), f"{path} has no type"


def test_spec_strings_lists_and_maps_are_bounded(schema: dict[str, Any]) -> None:
    # The apiserver estimates CEL cost from these bounds; unbounded ones can get the CRD rejected.
    for path, node in walk(schema["properties"]["spec"], ".spec"):
        kind = node.get("type")
        if kind == "string":
            assert "maxLength" in node or "enum" in node, f"{path} has no maxLength"
        elif kind == "array":
            assert "maxItems" in node, f"{path} has no maxItems"
        elif kind == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, f"{path} has no maxProperties"


ELASTIC_EVERY_FIELD = {"minNodes": 2, "maxNodes": 4, "belowMinTimeoutSeconds": 300, "resizeWindowSeconds": 20}


def test_full_example_covers_every_field(schema: dict[str, Any]) -> None:
    # Keeps the round-trip tests honest: a new field must be added to the example (multinode.testing.full_job).
    example_paths = set(value_paths(full_job()))
    # Exclusive alternatives (CEL allows one of them) come from a second object.
    example_paths |= set(value_paths({"spec": {"checkpointing": {"resumeFrom": {"path": "/checkpoints/x"}}}}))
    # A named gang scheduler excludes spec.podGroup and podTemplate.schedulerName, and each other.
    example_paths |= set(value_paths({"spec": {"scheduling": {"volcano": {"queue": "q", "schedulerName": "v"}}}}))
    example_paths |= set(value_paths({"spec": {"scheduling": {"coscheduling": {
        "schedulerName": "s", "scheduleTimeoutSeconds": 60}}}}))
    # spec.elastic excludes restartStrategy InPlace, which the example's spares need.
    example_paths |= set(value_paths({"spec": {"elastic": ELASTIC_EVERY_FIELD}}))
    schema_paths = {
        path for path, _ in walk_properties(schema) if path.startswith((".spec", ".status"))
    }
    assert schema_paths - example_paths == set()


def test_apiserver_pruning_keeps_everything_the_models_write(schema: dict[str, Any]) -> None:
    dumped = TrainingJob.model_validate(full_job()).model_dump(
        by_alias=True, exclude_none=True
    )
    dumped["metadata"] = {}  # the apiserver handles metadata itself
    assert prune(dumped, schema) == dumped


def test_crd_defaults_match_model_defaults(schema: dict[str, Any]) -> None:
    minimal = minimal_trainingjob()
    defaulted_by_apiserver = apply_defaults(minimal, schema)
    defaulted_by_model = TrainingJob.model_validate(minimal).model_dump(
        by_alias=True, exclude_none=True
    )
    assert defaulted_by_apiserver["spec"] == defaulted_by_model["spec"]
    assert defaulted_by_apiserver["spec"]["network"]["rendezvousPort"] == 29500


def test_the_status_lists_are_atomic(schema: dict[str, Any]) -> None:
    # The operator writes each whole (a merge patch replaces a list whatever its type); keyed entries only cost
    # the apiserver on every status write.
    status = schema["properties"]["status"]["properties"]
    list_types = {name: prop.get("x-kubernetes-list-type", "atomic")  # atomic when unset
                  for name, prop in status.items() if prop.get("type") == "array"}
    assert {"conditions", "nodeStatuses", "excludedNodes"} <= set(list_types)
    assert list_types == dict.fromkeys(list_types, "atomic")
