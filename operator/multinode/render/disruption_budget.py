"""The PodDisruptionBudget that makes a drain wait for the job's checkpoint (spec.checkpointing.
beforeDisruptionSeconds).

`kubectl drain` cordons the node, then evicts its pods through the Eviction API, retrying every 5 s while a
budget refuses. No eviction of a node pod is allowed (minAvailable numNodes), so the drain waits while the
operator asks for a checkpoint (reconcile/disruption.py); once it is mirrored, or the wait is over, the
operator deletes the gang itself (a delete is not an eviction) and the drain goes on. Pods that are not Ready yet are
not training: they may always be evicted (unhealthyPodEvictionPolicy AlwaysAllow). The mirror pod is not
covered: a drain moves it at once, and it resumes on another node.
"""

from __future__ import annotations

from typing import Any

from multinode.api import LABEL_NODE_INDEX, TrainingJob
from multinode.render.names import common_labels, job_identity, owner_reference, selector_labels


def disruption_budget_name(job_name: str) -> str:
    return job_name


def wants_disruption_budget(job: TrainingJob) -> bool:
    return job.spec.checkpointing is not None and job.spec.checkpointing.before_disruption_seconds > 0


def render_disruption_budget(job: TrainingJob) -> dict[str, Any]:
    identity = job_identity(job)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": disruption_budget_name(identity.name),
            "namespace": identity.namespace,
            "labels": common_labels(identity.name),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            # Every node pod must stay. An integer minAvailable: maxUnavailable (or a percentage) makes the
            # disruption controller read the owner's scale subresource, which a TrainingJob has not.
            "minAvailable": job.spec.num_nodes,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {
                "matchLabels": selector_labels(identity.name),
                # Node pods only (every attempt's): not the mirror, which carries no node index.
                "matchExpressions": [{"key": LABEL_NODE_INDEX, "operator": "Exists"}],
            },
        },
    }
