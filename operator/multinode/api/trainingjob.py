"""The TrainingJob object, how one stored by the apiserver is read, and the arithmetic every layer shares."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from multinode.api.base import DNS1035_LABEL_PATTERN, ApiModel
from multinode.api.cel import cel_rule
from multinode.api.constants import API_VERSION, KIND
from multinode.api.pod_fields import ObjectMeta
from multinode.api.spec import TrainingJobSpec
from multinode.api.status import TrainingJobStatus

# Pod hostnames are "<job>-<index>" and must be DNS labels (63 characters), and the
# headless Service is named after the job (DNS-1035). Only a root-level rule can read
# metadata.name; fieldPath points the error at it (the CRD declares metadata.name for
# that, see crd.openapi_schema), and the message names it too, for kubectl users.
# When spec is malformed, schema validation reports that and this rule only checks the name.
JOB_NAME_RULE = cel_rule(
    f"self.metadata.name.matches('{DNS1035_LABEL_PATTERN}') && "
    "(!has(self.spec) || !has(self.spec.numNodes) || "
    "size(self.metadata.name) + 1 + size(string(self.spec.numNodes - 1)) <= 63) && "
    "(!has(self.spec) || !has(self.spec.spareNodes) || self.spec.spareNodes == 0 || !has(self.spec.numNodes) || "
    "size(self.metadata.name) + 2 + size(string(self.spec.numNodes + 2 * self.spec.spareNodes)) <= 63) && "
    "(!has(self.spec) || !has(self.spec.elastic) || size(self.metadata.name) + 5 <= 63)",
    "metadata.name: must be a DNS-1035 label (lowercase letters, digits and '-', starting "
    "with a letter) short enough that '<name>-<index>' (and a spare's '<name>-s<serial>', an elastic job's "
    "'<name>-rdzv') fits 63 characters",
    field_path=".metadata.name",
)


class TrainingJob(ApiModel):
    """A multi-node training job: numNodes pods, one per node, started and restarted as a gang."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [JOB_NAME_RULE]})

    api_version: str = Field(API_VERSION, description="multinode.dev/v1alpha1")
    kind: str = Field(KIND, description="TrainingJob")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: TrainingJobSpec = Field(description="Desired state.")
    status: TrainingJobStatus | None = Field(None, description="Observed state.")


def read_stored_job(obj: Mapping[str, Any]) -> tuple[TrainingJob, tuple[str, ...]]:
    """A TrainingJob as the apiserver returned it, and the fields this version does not know, left out.

    What a user writes is validated strictly (TrainingJob.model_validate: an unknown key is an error).
    What the apiserver stored was accepted by its CRD, which prunes every field it does not declare: with
    this version's CRD nothing is left out. A newer CRD (the chart upgraded while this version's operator
    still runs, or the operator rolled back without its CRD) may hold fields added since: they are left out
    and named, so a job the apiserver accepted is never refused for them, and the caller can say what it
    did not apply. Any other validation error is raised.
    """
    try:
        return TrainingJob.model_validate(obj), ()
    except ValidationError as e:
        error, unknown = e, [err["loc"] for err in e.errors() if err["type"] == "extra_forbidden"]
    if not unknown:
        raise error
    pruned = copy.deepcopy(dict(obj))
    try:
        for loc in unknown:
            parent: Any = pruned
            for part in loc[:-1]:
                parent = parent[part]
            del parent[loc[-1]]
    except (KeyError, IndexError, TypeError):
        raise error from None
    return TrainingJob.model_validate(pruned), tuple(_dotted(loc) for loc in unknown)


def _dotted(loc: tuple[int | str, ...]) -> str:
    """spec.env[0].name, as kubectl and the apiserver's messages write a field's path."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def effective_num_proc_per_node(spec: TrainingJobSpec) -> int:
    """Processes per node: numProcPerNode, else one per GPU, else 1 for CPU jobs."""
    if spec.num_proc_per_node is not None:
        return spec.num_proc_per_node
    gpus = spec.resources_per_node.gpus
    return gpus if gpus > 0 else 1


def world_size(spec: TrainingJobSpec) -> int:
    """Total worker processes: nodes x processes per node (not the pod count, as in Kubeflow v1)."""
    return spec.num_nodes * effective_num_proc_per_node(spec)
