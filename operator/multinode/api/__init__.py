"""The TrainingJob API: pydantic models that are the single source of the CRD.

Imports nothing that talks to Kubernetes, and from the rest of multinode only what has no dependencies of its
own: the stdlib-only leaves (multinode.progress's marker, multinode.timeformat) and the checkpoint engine's
completion modes.
"""

from multinode.api.constants import (
    API_VERSION,
    CRD_NAME,
    GROUP,
    KIND,
    LABEL_ATTEMPT,
    LABEL_MIRROR_OF,
    LABEL_JOB_NAME,
    LABEL_NODE_INDEX,
    PLURAL,
    RESERVED_ENV_NAMES,
    VERSION,
)
from multinode.api.conditions import ConditionType
from multinode.api.pod_fields import (
    EnvVar,
    LocalObjectReference,
    ObjectMeta,
    Toleration,
    Volume,
    VolumeMount,
)
from multinode.api.network import NcclSpec, NetworkSpec, RdmaSpec
from multinode.api.spec import (
    PodTemplate,
    ResourcesPerNode,
    SuccessPolicy,
    TrainingJobSpec,
)
from multinode.api.status import (
    Condition,
    NodeCounts,
    NodeStatus,
    Phase,
    TrainingJobStatus,
)
from multinode.api.trainingjob import (
    TrainingJob,
    effective_num_proc_per_node,
    read_stored_job,
    world_size,
)

__all__ = [
    "API_VERSION",
    "CRD_NAME",
    "GROUP",
    "KIND",
    "LABEL_ATTEMPT",
    "LABEL_JOB_NAME",
    "LABEL_MIRROR_OF",
    "LABEL_NODE_INDEX",
    "PLURAL",
    "RESERVED_ENV_NAMES",
    "VERSION",
    "Condition",
    "ConditionType",
    "EnvVar",
    "LocalObjectReference",
    "NcclSpec",
    "NetworkSpec",
    "NodeCounts",
    "NodeStatus",
    "ObjectMeta",
    "Phase",
    "PodTemplate",
    "RdmaSpec",
    "ResourcesPerNode",
    "SuccessPolicy",
    "Toleration",
    "TrainingJob",
    "TrainingJobSpec",
    "TrainingJobStatus",
    "Volume",
    "VolumeMount",
    "effective_num_proc_per_node",
    "read_stored_job",
    "world_size",
]
