"""The TrainingJob object and the arithmetic every layer shares."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from multinode.api.base import DNS1035_LABEL_PATTERN, ApiModel
from multinode.api.cel import cel_rule
from multinode.api.constants import API_VERSION, KIND
from multinode.api.kube import ObjectMeta
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
    "size(self.metadata.name) + 1 + size(string(self.spec.numNodes - 1)) <= 63)",
    "metadata.name: must be a DNS-1035 label (lowercase letters, digits and '-', starting "
    "with a letter) short enough that '<name>-<index>' fits 63 characters",
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


def effective_num_proc_per_node(spec: TrainingJobSpec) -> int:
    """Processes per node: numProcPerNode, else one per GPU, else 1 for CPU jobs."""
    if spec.num_proc_per_node is not None:
        return spec.num_proc_per_node
    gpus = spec.resources_per_node.gpus
    return gpus if gpus > 0 else 1


def world_size(spec: TrainingJobSpec) -> int:
    """Total worker processes: nodes x processes per node (not the pod count, as in Kubeflow v1)."""
    return spec.num_nodes * effective_num_proc_per_node(spec)
