"""Base model and shared constrained types for the TrainingJob API.

Bounds (maxLength, maxItems, maxProperties) are not decoration: the apiserver
estimates the worst-case cost of every CEL rule from them and rejects the CRD
when a rule could cost too much, so every string and list the rules touch must
be bounded.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from multinode.api.quantity import QUANTITY_PATTERN

# Upper bounds, picked well above anything a real manifest needs.
MAX_NAME_LENGTH = 253  # DNS-1123 subdomain, the longest name Kubernetes allows
MAX_PATH_LENGTH = 4096
MAX_TEXT_LENGTH = 65536  # one command/args item or env value (scripts passed to `bash -c`)
MAX_ANNOTATION_VALUE_LENGTH = 262144  # the apiserver's cap on all annotations together
MAX_MAP_ENTRIES = 64
MAX_LABEL_VALUE_LENGTH = 63  # also a DNS label's

# Label value: empty, or up to 63 alphanumerics with -_. inside.
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# Qualified name as used for extended resources ("nvidia.com/gpu", "rdma/ib").
QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# DNS-1123 subdomain: the names of most objects (PriorityClass, ServiceAccount, PVC) and schedulerName.
DNS1123_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1035_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

Quantity = Annotated[str, Field(max_length=64, pattern=QUANTITY_PATTERN)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)]
# The name of an object the pods refer to (and the operator may read: its path), or a scheduler's name.
DnsSubdomain = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=DNS1123_SUBDOMAIN_PATTERN)]
Text = Annotated[str, Field(max_length=MAX_TEXT_LENGTH)]
LabelValue = Annotated[str, Field(max_length=MAX_LABEL_VALUE_LENGTH, pattern=LABEL_VALUE_PATTERN)]
AnnotationValue = Annotated[str, Field(max_length=MAX_ANNOTATION_VALUE_LENGTH)]


class ApiModel(BaseModel):
    """Base for every API object: camelCase on the wire, snake_case in Python.

    populate_by_name lets Python callers (and tests) use either spelling;
    model_dump(by_alias=True, exclude_none=True) yields what the apiserver stores.

    A key the model does not know is an error that names it (`spec.resourcesPerNode.gpu: Extra inputs are
    not permitted`), not a field silently dropped: the CRD generated from these models declares exactly
    their fields, so the apiserver would prune it too. Objects passed through to pods as Kubernetes shapes
    opt out (Volume, ObjectMeta: extra="allow"; affinity and env valueFrom are plain dicts), and so does
    the status (StatusModel).
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class StatusModel(ApiModel):
    """Base for what the operator and the mirror write under status: unknown keys are ignored.

    No user writes a status, so there is no typo to catch; and a status is read by versions other than the
    one that wrote it: an operator rolled back reads what the newer one wrote, a client older than the
    operator reads its status. A field added since is skipped there, never a validation error that would
    fail every reconcile of every job.
    """

    model_config = ConfigDict(extra="ignore")


M = TypeVar("M", bound=BaseModel)


def deep_copied(model: M) -> M:
    """A deep copy of `model` by a dump and a validation: about 2.7x faster than `model_copy(deep=True)`
    (copy.deepcopy walks every object in Python), which was a tenth of the planner's time per reconcile
    (docs/benchmarks.md, "Throughput"). A model holding a value set in code beyond its bounds does not
    validate: that one is copied the slow way rather than failing the reconcile."""
    try:
        return type(model).model_validate(model.model_dump(round_trip=True))
    except ValidationError:
        return model.model_copy(deep=True)
