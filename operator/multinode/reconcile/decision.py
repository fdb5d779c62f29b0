"""What one policy decides in a pass, as a value: the policies change nothing they are given; plan.py folds
their decisions, in its order, into the status and the Plan (`fold`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from multinode.api import TrainingJobStatus
from multinode.api.status import ConditionStatus
from multinode.api.timestamps import rfc3339
from multinode.reconcile.conditions import set_condition
from multinode.reconcile.failures import Failure
from multinode.reconcile.kinds import GroupPrune, ObjectRef, StatusWrite
from multinode.reconcile.outcome import Event, Plan, Verdict

_STATUS_FIELDS = frozenset(TrainingJobStatus.model_fields)


@dataclass(frozen=True)
class SetCondition:
    """A condition to set; its lastTransitionTime moves only when its status flips (conditions.py)."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    """One policy's answer for this pass. Empty (`Decision()`) when the policy has nothing to say.

    - `verdict`: the job's phase and why (a terminal one finishes the job); `failure`: the attempt failed
      (the failure policy then restarts the gang or fails the job).
    - `status`: fields of the status to set, by attribute name, each to its whole new value (a policy that
      changes a nested model returns a changed copy); `conditions`: conditions to set, in order.
    - actions: objects to create (before the pods), pods to delete and to force-delete (without waiting for
      a kubelet; taken out of the graceful deletions), an integration's objects to delete, to prune and
      whose status to write, spec.suspend to write, Events; `stop_creating`: none of the attempt's pods is
      created this pass; `delete_job`: the job itself goes.
    - `requeue_after`: come back within these seconds (a timer); the shortest of the pass wins.
    - `annotate`: annotations to merge into pods, by pod name; `spares_to_create`: hot spares' pods.
    """

    verdict: Verdict | None = None
    failure: Failure | None = None
    status: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    conditions: tuple[SetCondition, ...] = ()
    objects_to_create: tuple[dict[str, Any], ...] = ()
    delete: tuple[str, ...] = ()
    force_delete: tuple[str, ...] = ()
    objects_to_delete: tuple[ObjectRef, ...] = ()
    objects_to_prune: tuple[GroupPrune, ...] = ()
    status_writes: tuple[StatusWrite, ...] = ()
    job_suspend: bool | None = None
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None
    stop_creating: bool = False
    delete_job: bool = False
    # Pods' annotations to merge in, by pod name (an in-place restart's new attempt, reconcile/in_place.py).
    annotate: tuple[tuple[str, Mapping[str, str]], ...] = ()
    # Hot spares to create (spares.py): last, and a refusal is only logged (the job runs without them).
    spares_to_create: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.status) - _STATUS_FIELDS
        if unknown:
            raise ValueError(f"not fields of TrainingJobStatus: {sorted(unknown)}")
        if not isinstance(self.status, MappingProxyType):  # read-only, like the rest of the value
            object.__setattr__(self, "status", MappingProxyType(dict(self.status)))

    def then(self, later: Decision) -> Decision:
        """This decision followed by `later`: both sets of edits and actions, the later's values winning
        where both set one; the sooner timer."""
        timers = [t for t in (self.requeue_after, later.requeue_after) if t is not None]
        return Decision(
            verdict=later.verdict or self.verdict, failure=later.failure or self.failure,
            status={**self.status, **later.status}, conditions=self.conditions + later.conditions,
            objects_to_create=self.objects_to_create + later.objects_to_create,
            delete=self.delete + later.delete, force_delete=self.force_delete + later.force_delete,
            objects_to_delete=self.objects_to_delete + later.objects_to_delete,
            objects_to_prune=self.objects_to_prune + later.objects_to_prune,
            status_writes=self.status_writes + later.status_writes,
            job_suspend=later.job_suspend if later.job_suspend is not None else self.job_suspend,
            events=self.events + later.events, requeue_after=min(timers) if timers else None,
            stop_creating=self.stop_creating or later.stop_creating, delete_job=self.delete_job or later.delete_job,
            annotate=self.annotate + later.annotate, spares_to_create=self.spares_to_create + later.spares_to_create)


def fold(result: Plan, decision: Decision, *, now: datetime, generation: int | None) -> None:
    """Apply one decision to the pass's Plan and its status (`result.status`): the one place a policy's
    decision takes effect (plan.py itself writes only its own bookkeeping: times, the rendered objects)."""
    status = result.status
    for name, value in decision.status.items():
        setattr(status, name, value)
    for c in decision.conditions:
        set_condition(status.conditions, c.type, c.status, c.reason, c.message, now=rfc3339(now),
                      generation=generation)
    if decision.stop_creating:
        result.pods_to_create = []
    result.objects_to_create.extend(decision.objects_to_create)
    result.delete(decision.delete)
    if decision.force_delete:
        forcing = set(result.pods_to_force_delete)
        result.pods_to_force_delete.extend(n for n in dict.fromkeys(decision.force_delete) if n not in forcing)
        moved = set(decision.force_delete)  # one pass, not one list.remove per pod
        result.pods_to_delete = [name for name in result.pods_to_delete if name not in moved]
    result.objects_to_delete.extend(decision.objects_to_delete)
    result.objects_to_prune.extend(decision.objects_to_prune)
    result.status_writes.extend(decision.status_writes)
    if decision.job_suspend is not None:
        result.job_suspend = decision.job_suspend
    result.events.extend(decision.events)
    result.come_back_in(decision.requeue_after)
    result.delete_job = result.delete_job or decision.delete_job
    result.spares_to_create.extend(decision.spares_to_create)
    for name, merged in decision.annotate:
        result.pods_to_annotate[name] = {**result.pods_to_annotate.get(name, {}), **merged}
