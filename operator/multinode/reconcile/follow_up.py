"""Whether a pass that wrote the job's status needs the pass after it. Pure.

The watch brings every status patch of the operator's back as an event, and that echo used to reconcile the job
once more: about half the reconciles of a job's start, each reading the job, observing it and planning, to find
in most cases nothing new (the echo holds only what the pass wrote). The controller skips the echo
(controller/watches.py) and asks this module instead, once per status write: a plan made again at once, on the
same observations with the status just written, wants nothing the first did not do (`adds_nothing`). When it
does want more, the job is queued again at once, as the echo would have.

That pass matters where a policy acts on the status an earlier one wrote: a job marked Succeeded is deleted by
its TTL only in the pass after, which reads the completion time it wrote. A full `make test` caught two such jobs
never deleted when the echo was skipped without this check.

The comparison is by name: the first plan's pods, objects and deletions are in flight (its creates are not in
the stores yet), so a second plan that asks for them again adds nothing; anything else it wants (another
object, an event, a deletion of the job, a sooner timer, a status of its own) does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from multinode.reconcile.outcome import Plan, pod_names

# A timer the second plan sets this much sooner than the first's is the same timer (the same clock reading).
TIMER_SLACK_SECONDS = 0.001


def _names(objects: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o.get("kind", ""), (o.get("metadata") or {}).get("name", "")) for o in objects}


def _sooner(first: float | None, again: float | None) -> bool:
    if again is None:
        return False
    return first is None or again < first - TIMER_SLACK_SECONDS


def adds_nothing(first: Plan, again: Plan) -> bool:
    """Whether `again` (planned on `first`'s observations and status) wants nothing that `first` did not do."""
    if again.status != first.status:
        return False
    if again.events or again.status_writes or (again.delete_job and not first.delete_job):
        return False
    if again.job_suspend is not None and again.job_suspend != first.job_suspend:
        return False
    if _sooner(first.requeue_after, again.requeue_after):
        return False
    if again.service is not None and first.service is None:
        return False
    if again.attempt_env is not None and (first.attempt_env is None or _names([again.attempt_env])
                                          != _names([first.attempt_env])):
        return False
    if again.stale_attempt_env is not None and again.stale_attempt_env != first.stale_attempt_env:
        return False
    return (set(pod_names(again.pods_to_create)) <= set(pod_names(first.pods_to_create))
            and set(again.pods_to_delete) <= set(first.pods_to_delete)
            and set(again.pods_to_force_delete) <= set(first.pods_to_force_delete)
            and _names(again.objects_to_create) <= _names(first.objects_to_create)
            and set(again.objects_to_delete) <= set(first.objects_to_delete)
            and set(again.objects_to_prune) <= set(first.objects_to_prune)
            and _names(again.spares_to_create) <= _names(first.spares_to_create)
            and all(first.pods_to_annotate.get(pod) == annotations
                    for pod, annotations in again.pods_to_annotate.items()))
