"""Admission rules the CRD carries: present, naming their field, and built from the models."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import pytest
from crd_schema_walk import walk

from multinode.api import RESERVED_ENV_NAMES, TrainingJobSpec
from multinode.api.base import DNS1035_LABEL_PATTERN
from multinode.api.quantity import QUANTITY_PATTERN
from multinode.api.cel import cel_string_list, immutable_field_rule
from multinode.api.crd import openapi_schema, to_structural


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return openapi_schema()


def node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    return dict(walk(schema))[path]


def rules(schema: dict[str, Any], path: str) -> list[dict[str, Any]]:
    return node(schema, path).get("x-kubernetes-validations", [])


def test_every_message_starts_with_the_field_it_is_about(schema: dict[str, Any]) -> None:
    found = 0
    for path, entry in walk(schema):
        for rule in entry.get("x-kubernetes-validations", []):
            found += 1
            assert re.match(r"^(metadata|spec)\.[A-Za-z.]+[: ]", rule["message"]), (path, rule)
    assert found >= 17  # name + 14 immutability + env (2) + volume + mount


def test_job_name_rule_keeps_hostnames_within_63_characters(schema: dict[str, Any]) -> None:
    (rule,) = rules(schema, "")
    assert rule["message"].startswith("metadata.name: must be a DNS-1035 label")
    assert rule["fieldPath"] == ".metadata.name"
    assert f"self.metadata.name.matches('{DNS1035_LABEL_PATTERN}')" in rule["rule"]
    assert "size(self.metadata.name) + 1 + size(string(self.spec.numNodes - 1)) <= 63" in (
        rule["rule"]
    )


@pytest.mark.parametrize("name", ["llama", "a", "job-2", "x" * 63])
def test_dns1035_pattern_accepts(name: str) -> None:
    assert re.match(DNS1035_LABEL_PATTERN, name)


@pytest.mark.parametrize("name", ["2job", "Job", "job-", "job.x", "job_x", ""])
def test_dns1035_pattern_rejects(name: str) -> None:
    assert not re.match(DNS1035_LABEL_PATTERN, name)


@pytest.mark.parametrize("quantity", ["-1", "1.2.3", "64GB", "Gi", "1 Gi", ""])
def test_quantity_pattern_rejects(quantity: str) -> None:
    assert not re.match(QUANTITY_PATTERN, quantity)


def test_openapi_bounds(schema: dict[str, Any]) -> None:
    assert (node(schema, ".spec.numNodes")["minimum"], node(schema, ".spec.numNodes")["maximum"]) == (1, 20000)
    assert node(schema, ".spec.numProcPerNode")["minimum"] == 1
    assert node(schema, ".spec.resourcesPerNode.gpus")["minimum"] == 0
    assert node(schema, ".spec.network.rdma.count")["minimum"] == 1
    port = node(schema, ".spec.network.rendezvousPort")
    assert (port["minimum"], port["maximum"], port["default"]) == (1, 65535, 29500)
    assert node(schema, ".spec.image")["minLength"] == 1
    quantities = (".spec.shmSize", ".spec.resourcesPerNode.cpu", ".spec.resourcesPerNode.memory")
    for quantity in quantities:
        assert node(schema, quantity)["pattern"] == QUANTITY_PATTERN


def test_enums(schema: dict[str, Any]) -> None:
    assert node(schema, ".spec.imagePullPolicy")["enum"] == ["Always", "IfNotPresent", "Never"]
    assert node(schema, ".spec.successPolicy")["enum"] == ["AllNodes", "LeaderOnly"]
    assert node(schema, ".spec.network.nccl.debug")["enum"] == ["VERSION", "WARN", "INFO", "TRACE"]
    assert node(schema, ".spec.podTemplate.tolerations[].operator")["enum"] == ["Exists", "Equal"]
    assert node(schema, ".status.conditions[].status")["enum"] == ["True", "False", "Unknown"]
    assert "Running" in node(schema, ".status.phase")["enum"]


def test_env_names_are_unique_and_not_reserved(schema: dict[str, Any]) -> None:
    env = node(schema, ".spec.env")
    assert env["x-kubernetes-list-type"] == "map"
    assert env["x-kubernetes-list-map-keys"] == ["name"]
    (rule,) = rules(schema, ".spec.env[].name")
    listed = set(re.findall(r"'([A-Z_]+)'", rule["rule"]))
    assert listed == RESERVED_ENV_NAMES
    assert rule["rule"].startswith("!(self in [")
    assert "reserved" in rule["message"]
    assert "reserved" in rule["messageExpression"]


def test_env_value_and_value_from_are_exclusive(schema: dict[str, Any]) -> None:
    (rule,) = rules(schema, ".spec.env[]")
    assert rule["rule"] == "!(has(self.value) && has(self.valueFrom))"


def test_shm_volume_name_and_path_are_reserved(schema: dict[str, Any]) -> None:
    (volume_rule,) = rules(schema, ".spec.podTemplate.volumes[].name")
    assert volume_rule["rule"] == "self != 'dshm'"
    (mount_rule,) = rules(schema, ".spec.podTemplate.volumeMounts[].mountPath")
    assert "self != '/dev/shm'" in mount_rule["rule"]


def test_every_spec_field_is_immutable(schema: dict[str, Any]) -> None:
    spec = node(schema, ".spec")
    by_path = {rule.get("fieldPath"): rule for rule in rules(schema, ".spec") if "is immutable" in rule["message"]}
    mutable = {TrainingJobSpec.model_fields[name].alias for name in TrainingJobSpec.MUTABLE_FIELDS}
    assert mutable == {"suspend", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "failurePolicy", "hangDetection",
                       "scheduling"}
    assert set(by_path) == {f".{field}" for field in spec["properties"] if field not in mutable}
    image = by_path[".image"]
    assert image["message"] == "spec.image is immutable: create a new TrainingJob to change it"
    # Presence is compared too, so adding or removing an optional field is caught.
    assert image["rule"] == (
        "has(self.image) ? (has(oldSelf.image) && self.image == oldSelf.image)"
        " : !has(oldSelf.image)"
    )


def test_fields_listed_as_mutable_get_no_immutability_rule() -> None:
    class SpecWithMutableImage(TrainingJobSpec):
        MUTABLE_FIELDS: ClassVar[frozenset[str]] = frozenset({"image"})

    generated = to_structural(SpecWithMutableImage.model_json_schema(by_alias=True))
    paths = {rule["fieldPath"] for rule in generated["x-kubernetes-validations"]}
    assert ".image" not in paths
    assert ".numNodes" in paths


def test_immutable_rule_refuses_names_cel_would_need_escaped() -> None:
    with pytest.raises(ValueError):
        immutable_field_rule("namespace", "spec")
    with pytest.raises(ValueError):
        immutable_field_rule("shm-size", "spec")


def test_cel_string_list_is_sorted_and_refuses_quotes() -> None:
    assert cel_string_list(["B", "A"]) == "['A', 'B']"
    with pytest.raises(ValueError):
        cel_string_list(["it's"])


def test_checkpointing_needs_a_cache_on_another_mount_path(schema: dict[str, Any]) -> None:
    by_path = {rule.get("fieldPath"): rule for rule in rules(schema, ".spec") if "is immutable" not in rule["message"]}
    assert by_path[".checkpointing"]["rule"] == "!has(self.checkpointing) || has(self.cache)"
    assert "spec.checkpointing.mountPath must differ" in by_path[".checkpointing.mountPath"]["message"]
    (resume_rule,) = rules(schema, ".spec.checkpointing.resumeFrom")
    assert resume_rule["rule"] == "has(self.trainingJob) != has(self.path)"
