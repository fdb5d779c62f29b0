"""What went wrong with an attempt, and what the failure policy says to do about it.

One attempt fails as a whole: the first failure found decides (a failed pod before a lost one, lowest
node index first), so the reason a user reads is the cause, not the collateral damage.
"""

from __future__ import annotations

from dataclasses import dataclass

from multinode.api.lifecycle import FailureAction, FailurePolicy, FailureRule
from multinode.reconcile.observe import ObservedPod

# Uncounted restarts still end somewhere: a job whose nodes keep vanishing fails after this many.
MAX_UNCOUNTED_RESTARTS = 100


@dataclass(frozen=True)
class Failure:
    reason: str  # PodFailed, PreflightFailed, NodeLost, StartupTimeout, ImageDigestMismatch
    message: str
    exit_code: int | None = None
    # Every reason a rule's onReasons may match: the container's, the pod's, the disruption's.
    reasons: frozenset[str] = frozenset()
    node_loss: bool = False


@dataclass(frozen=True)
class Decision:
    action: FailureAction
    why: str  # which rule decided, for the status message


def pod_failure(failed: list[ObservedPod]) -> Failure:
    p = min(failed, key=lambda pod: pod.index)
    detail = f"exit code {p.exit_code}" if p.exit_code is not None else "no exit code"
    why = f", reason {p.reason}" if p.reason else ""
    words = f": {p.message}" if p.message else ""
    more = f" ({len(failed) - 1} more pods failed)" if len(failed) > 1 else ""
    reason = "PreflightFailed" if p.reason == "PreflightFailed" else "PodFailed"
    reasons = {r for r in (p.reason, p.disruption, reason) if r}
    # A pod the kubelet or a controller killed for a disruption is a lost node, not a crash.
    node_loss = p.disruption is not None or p.reason in ("Evicted", "NodeLost", "Terminated", "Shutdown")
    return Failure(reason, f"pod {p.name} (node {p.index}) failed: {detail}{why}{words}{more}",
                   exit_code=p.exit_code, reasons=frozenset(reasons), node_loss=node_loss)


def lost_failure(index: int, pod: str | None, last_reason: str | None) -> Failure:
    seen = f" (last seen: {last_reason})" if last_reason else ""
    return Failure("NodeLost", f"pod {pod or '?'} of node {index} was deleted before it finished{seen}; "
                               "the gang cannot continue without it",
                   reasons=frozenset({"NodeLost", *([last_reason] if last_reason else [])}), node_loss=True)


def _matches(rule: FailureRule, failure: Failure) -> bool:
    if rule.on_exit_codes is not None and not (
        failure.exit_code is not None and any(r.min <= failure.exit_code <= r.max for r in rule.on_exit_codes)
    ):
        return False
    if rule.on_reasons is not None and not failure.reasons & set(rule.on_reasons):
        return False
    if rule.on_node_loss is not None and rule.on_node_loss != failure.node_loss:
        return False
    return True


def decide(policy: FailurePolicy, failure: Failure) -> Decision:
    """User rules first, in order; then the defaults: node loss restarts without counting, the rest counts."""
    for i, rule in enumerate(policy.rules or []):
        if _matches(rule, failure):
            return Decision(rule.action, f"failurePolicy.rules[{i}]")
    if failure.node_loss:
        return Decision(FailureAction.RESTART_WITHOUT_COUNTING, "default: node loss restarts without counting")
    return Decision(FailureAction.RESTART, "default: failures restart, counted")
