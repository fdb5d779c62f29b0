"""spec.podGroup (deprecated): an out-of-tree gang scheduler's keys on the pods; no group made."""

from multinode.integrations.pod_group_labels.labels import MIN_MEMBER_ANNOTATION, PodGroupLabels

__all__ = ["MIN_MEMBER_ANNOTATION", "PodGroupLabels"]
