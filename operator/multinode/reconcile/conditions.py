"""Conditions as the Kubernetes API conventions want them: one per type, and lastTransitionTime moves
only when the status flips (a new message alone does not make a transition)."""

from __future__ import annotations

from multinode.api import Condition
from multinode.api.status import MAX_CONDITION_MESSAGE, ConditionStatus

TRUNCATED = " ... (truncated)"


def bounded(message: str) -> str:
    """Messages quote the apiserver, which echoes invalid values (a 70,000-character label key): keep
    what fits the CRD's bound, or the status patch (and the Condition model) would refuse the message."""
    if len(message) <= MAX_CONDITION_MESSAGE:
        return message
    return message[:MAX_CONDITION_MESSAGE - len(TRUNCATED)] + TRUNCATED


def set_condition(conditions: list[Condition], type_: str, status: ConditionStatus, reason: str, message: str,
                  *, now: str, generation: int | None) -> None:
    message = bounded(message)
    for i, existing in enumerate(conditions):
        if existing.type == type_:
            changed = existing.status != status
            conditions[i] = Condition(
                type=type_, status=status, reason=reason, message=message,
                last_transition_time=now if changed else existing.last_transition_time,
                observed_generation=generation,
            )
            return
    conditions.append(Condition(type=type_, status=status, reason=reason, message=message,
                                last_transition_time=now, observed_generation=generation))


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)
