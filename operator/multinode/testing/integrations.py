"""The integrations as one planning pass sees them (reconcile/integration.py Seen), from plain values: what a
test of the planner hands `Observed(integrations=...)` instead of the controller's discovery and watches."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from multinode.integrations.kueue import Kueue, KueueObserved, ObservedWorkload
from multinode.integrations.podgroup import NativePodGroup, ObservedPodGroup
from multinode.integrations.registry import INTEGRATIONS
from multinode.reconcile.integration import Seen


def seen_integrations(*, gang_api: bool = False, pod_groups: Iterable[ObservedPodGroup] = (),
                      kueue_api: bool = False, workload: ObservedWorkload | None = None,
                      flavors: Mapping[str, Mapping[str, str]] | None = None,
                      priority: int | None = None) -> tuple[Seen, ...]:
    """Every integration of the registry, in its order: `gang_api` and `kueue_api` say whether the apiserver
    serves native PodGroups and Kueue's Workloads; the job's PodGroups, its Workload, the flavors' nodeLabels
    by name and its PriorityClass' value are what they observed. Kueue's observation is given whether or not
    the job has a queue name (the controller's has none for a job without one; the gate reads the label)."""
    seen = []
    for integration in INTEGRATIONS:
        if isinstance(integration, NativePodGroup):
            seen.append(Seen(integration, gang_api, tuple(pod_groups) if gang_api else None))
        elif isinstance(integration, Kueue):
            seen.append(Seen(integration, kueue_api,
                             KueueObserved(workload, dict(flavors or {}), priority) if kueue_api else None))
        else:
            seen.append(Seen(integration))
    return tuple(seen)
