"""Subsets of core Kubernetes types that TrainingJob passes through to its pods.

Only the fields the operator reads are modelled. Where users need the full
Kubernetes shape (env valueFrom, volume sources, affinity) the schema keeps
unknown fields, and the apiserver validates them when the operator creates the pod.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, WithJsonSchema
from pydantic.config import JsonDict

from multinode.api.base import (
    DNS1123_LABEL_PATTERN,
    MAX_NAME_LENGTH,
    MAX_PATH_LENGTH,
    MAX_TEXT_LENGTH,
    ApiModel,
)
from multinode.api.cel import cel_rule, cel_string_list
from multinode.api.constants import RESERVED_ENV_NAMES, SHM_MOUNT_PATH, SHM_VOLUME_NAME

PRESERVE_UNKNOWN: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}


class EnvVar(ApiModel):
    """An environment variable for the trainer container (core/v1 EnvVar)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "!(has(self.value) && has(self.valueFrom))",
                    "spec.env: value and valueFrom are mutually exclusive",
                )
            ]
        }
    )

    name: str = Field(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        description=(
            "Variable name. Names multinode sets itself (see docs/env.md) are rejected."
        ),
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    f"!(self in {cel_string_list(RESERVED_ENV_NAMES)})",
                    "spec.env: this variable is reserved: multinode sets it on every node "
                    "(see docs/env.md for the list)",
                    message_expression=(
                        "'spec.env: ' + self + ' is reserved: multinode sets it on every "
                        "node (see docs/env.md for the list)'"
                    ),
                )
            ]
        },
    )
    value: str | None = Field(
        None,
        max_length=MAX_TEXT_LENGTH,
        description="Literal value; $(VAR) references to earlier variables are expanded.",
    )
    value_from: dict[str, Any] | None = Field(
        None,
        description=(
            "Source for the value (secretKeyRef, configMapKeyRef, fieldRef, "
            "resourceFieldRef), exactly as in a core/v1 EnvVar."
        ),
        json_schema_extra=PRESERVE_UNKNOWN,
    )


class Toleration(ApiModel):
    """A core/v1 Toleration copied onto every node pod."""

    key: str | None = Field(
        None, max_length=316, description="Taint key to match; empty matches all keys."
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        None, description="Exists or Equal (Kubernetes default Equal)."
    )
    value: str | None = Field(None, max_length=63, description="Taint value to match.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: int | None = Field(
        None,
        description="For NoExecute: how long the pod stays bound after the taint appears.",
    )


# Affinity: typed down to the lists the operator adds to (render/pod.py: a required node selector term
# excluding unhealthy nodes, a required pod anti-affinity term keeping the job's pods on different nodes),
# so a malformed one is refused at admission by field instead of failing every render; below those
# lists, and everywhere else, the core/v1 shape passes through for the apiserver to validate.
MAX_AFFINITY_TERMS = 32
PassThrough = Annotated[dict[str, Any], WithJsonSchema({"type": "object", **PRESERVE_UNKNOWN})]


class NodeSelectorTerm(ApiModel):
    """A core/v1 NodeSelectorTerm; its requirements pass through as written."""

    model_config = ConfigDict(extra="allow")

    match_expressions: list[PassThrough] | None = Field(None, max_length=MAX_AFFINITY_TERMS,
                                                         description="Node label requirements.")
    match_fields: list[PassThrough] | None = Field(None, max_length=MAX_AFFINITY_TERMS,
                                                   description="Node field requirements.")


class NodeSelector(ApiModel):
    """A core/v1 NodeSelector: terms ORed."""

    model_config = ConfigDict(extra="allow")

    node_selector_terms: list[NodeSelectorTerm] = Field(max_length=MAX_AFFINITY_TERMS,
                                                       description="Terms, any of which selects a node.")


class NodeAffinity(ApiModel):
    """A core/v1 NodeAffinity."""

    model_config = ConfigDict(extra="allow")

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        None, description="Nodes a pod may run on.")


class PodAntiAffinity(ApiModel):
    """A core/v1 PodAntiAffinity."""

    model_config = ConfigDict(extra="allow")

    required_during_scheduling_ignored_during_execution: list[PassThrough] | None = Field(
        None, max_length=MAX_AFFINITY_TERMS, description="core/v1 PodAffinityTerms that must all hold.")


class Affinity(ApiModel):
    """A core/v1 Affinity. The operator adds to it: a node selector requirement keeping new attempts off
    excluded nodes, and a pod anti-affinity term keeping each node of a job on a machine of its own."""

    model_config = ConfigDict(extra="allow")

    node_affinity: NodeAffinity | None = Field(None, description="core/v1 NodeAffinity.")
    pod_anti_affinity: PodAntiAffinity | None = Field(None, description="core/v1 PodAntiAffinity.")


class LocalObjectReference(ApiModel):
    """Reference to an object in the job's namespace, by name."""

    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, description="Object name.")


class Volume(ApiModel):
    """A pod volume: a name plus exactly one core/v1 volume source, passed through as is."""

    # extra="allow" keeps the volume source (hostPath, persistentVolumeClaim, ...);
    # the CRD generator turns it into x-kubernetes-preserve-unknown-fields.
    model_config = ConfigDict(extra="allow")

    name: str = Field(
        max_length=63,
        pattern=DNS1123_LABEL_PATTERN,
        description=f"Volume name (DNS-1123 label); '{SHM_VOLUME_NAME}' is reserved.",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    f"self != '{SHM_VOLUME_NAME}'",
                    f"spec.podTemplate.volumes: the name '{SHM_VOLUME_NAME}' is reserved "
                    f"for the {SHM_MOUNT_PATH} volume multinode adds (size it with spec.shmSize)",
                )
            ]
        },
    )


class VolumeMount(ApiModel):
    """Mounts one of spec.podTemplate.volumes into the trainer container."""

    name: str = Field(max_length=63, description="Name of the volume to mount.")
    mount_path: str = Field(
        min_length=1,
        max_length=MAX_PATH_LENGTH,
        description=f"Path in the container; {SHM_MOUNT_PATH} is reserved (use spec.shmSize).",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    f"self != '{SHM_MOUNT_PATH}' && self != '{SHM_MOUNT_PATH}/'",
                    f"spec.podTemplate.volumeMounts: {SHM_MOUNT_PATH} is reserved: "
                    "multinode mounts a memory volume there (size it with spec.shmSize)",
                )
            ]
        },
    )
    read_only: bool | None = Field(None, description="Mount read-only.")
    sub_path: str | None = Field(
        None, max_length=MAX_PATH_LENGTH, description="Sub-path of the volume to mount."
    )


class ObjectMeta(ApiModel):
    """The part of metav1.ObjectMeta the operator reads; the rest is kept, not modelled."""

    model_config = ConfigDict(extra="allow")

    name: str | None = Field(None, description="Object name.")
    namespace: str | None = Field(None, description="Object namespace.")
    uid: str | None = Field(None, description="Unique id assigned by the apiserver.")
    generation: int | None = Field(None, description="Spec generation.")
    resource_version: str | None = Field(None, description="Optimistic-concurrency version.")
    creation_timestamp: str | None = Field(None, description="RFC3339 creation time.")
    labels: dict[str, str] | None = Field(None, description="Object labels.")
    annotations: dict[str, str] | None = Field(None, description="Object annotations.")
