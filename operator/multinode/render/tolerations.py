"""Node-loss tolerations of a node pod, and how long a set of tolerations keeps a pod on a lost node.

Kubernetes gives every pod `tolerationSeconds: 300` for node.kubernetes.io/not-ready and unreachable
(the DefaultTolerationSeconds admission plugin), so a gang on a dead node waits five minutes for its
eviction. The operator sets spec.failurePolicy.nodeLossTolerationSeconds instead, and reads the same
tolerations back (reconcile/node_loss.py) to decide when it restarts the gang itself: the taint manager
and the operator agree, and whichever acts first, the outcome is the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE

NODE_LOSS_TAINTS = (TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE)


def _covers(toleration: Mapping[str, Any], taint_key: str) -> bool:
    """Whether a toleration tolerates the NoExecute taint `taint_key` (Kubernetes' matching rules)."""
    if toleration.get("effect") not in (None, "", "NoExecute"):
        return False
    key = toleration.get("key")
    if not key:  # an empty key with operator Exists tolerates every taint
        return toleration.get("operator") == "Exists"
    return bool(key == taint_key)


def user_tolerations(job: TrainingJob) -> list[dict[str, Any]]:
    return [t.model_dump(by_alias=True, exclude_none=True) for t in job.spec.pod_template.tolerations or []]


def pod_tolerations(job: TrainingJob) -> list[dict[str, Any]]:
    """The podTemplate's tolerations, plus ours for each node-loss taint none of them covers: a user who
    tolerates a key (for longer, or forever) keeps that choice."""
    own = user_tolerations(job)
    seconds = job.spec.failure_policy.node_loss_toleration_seconds
    ours = [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
            for key in NODE_LOSS_TAINTS if not any(_covers(t, key) for t in own)]
    return [*own, *ours]


def mirror_tolerations(job: TrainingJob) -> list[dict[str, Any]]:
    """The mirror pod's: ours for each node-loss taint first, then the podTemplate's (a GPU pool's taint).
    The first toleration that matches a taint decides how long a pod stays (tolerated_seconds), so a user
    who tolerates node loss for long, or forever (an empty key with Exists), keeps that for the trainers,
    while the mirror, the job's only copy process, leaves a lost node as the operator replaces it
    (reconcile/checkpointing.py)."""
    seconds = job.spec.failure_policy.node_loss_toleration_seconds
    ours = [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
            for key in NODE_LOSS_TAINTS]
    return [*ours, *user_tolerations(job)]


def tolerated_seconds(tolerations: Iterable[Mapping[str, Any]], taint_key: str) -> float | None:
    """How long a pod with `tolerations` stays on a node tainted `taint_key`: 0 when nothing tolerates it,
    None when it is tolerated forever. The first matching toleration decides, as in the taint manager
    (GetMatchingTolerations takes the first per taint)."""
    first = next((t for t in tolerations if _covers(t, taint_key)), None)
    if first is None:
        return 0.0
    seconds = first.get("tolerationSeconds")
    return None if seconds is None else float(max(0, int(seconds)))
