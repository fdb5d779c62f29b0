"""Conditions as the Kubernetes API conventions want them: one per type, and lastTransitionTime moves
only when the status flips (a new message alone does not make a transition)."""

from __future__ import annotations

from multinode.api import Condition


def set_condition(conditions: list[Condition], type_: str, status: str, reason: str, message: str,
                  *, now: str, generation: int | None) -> None:
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
