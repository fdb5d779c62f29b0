"""The native gang (scheduling.k8s.io/v1alpha2 PodGroup per attempt): group.py."""

from multinode.integrations.podgroup.group import (POD_GROUP, NativePodGroup, ObservedPodGroup, observe_pod_group,
                                                   render_pod_group)

__all__ = ["POD_GROUP", "NativePodGroup", "ObservedPodGroup", "observe_pod_group", "render_pod_group"]
