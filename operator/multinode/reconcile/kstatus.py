"""The conditions kstatus reads (sigs.k8s.io/cli-utils pkg/kstatus: how Flux, kpt and `kubectl wait`-style
tools judge a resource's health): Ready, Reconciling and Stalled, derived from the phase and the conditions
the rest of the status already has, which keep their meaning.

kstatus, in order: a status.observedGeneration behind metadata.generation is InProgress (plan.py writes it
each pass, so a spec change not yet seen reads so); Reconciling True is InProgress; Stalled True is
Failed; then Ready True is Current and Ready False or Unknown is InProgress. So:

| phase                                 | Reconciling | Stalled | Ready   | kstatus    |
|---------------------------------------|-------------|---------|---------|------------|
| Pending, Starting, Running, Restarting | True        | False   | Unknown | InProgress |
| Suspended                             | False       | False   | True    | Current    |
| Succeeded                             | False       | False   | True    | Current    |
| Failed                                | False       | True    | False   | Failed     |

A suspended job is Current: nothing happens until someone (a user, Kueue) resumes it, and a GitOps tool
waiting on a job queued for hours would time out and call the whole sync failed. Ready means "nothing left
to wait for", not "trains now": the Running condition says that. Reasons and messages are those of the
condition that decided (Running's while in progress, Failed's or Succeeded's at the end), so Flux shows
the same words as `kubectl describe`.
"""

from __future__ import annotations

from datetime import datetime

from multinode.api import Phase, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.status import ConditionStatus
from multinode.api.timestamps import rfc3339
from multinode.reconcile.conditions import find_condition, set_condition


def _said(status: TrainingJobStatus, type_: str, reason: str, message: str) -> tuple[str, str]:
    """The reason and message of condition `type_`, or the ones given when it is not there."""
    condition = find_condition(status.conditions, type_)
    if condition is None:
        return reason, message
    return condition.reason or reason, condition.message or message


def kstatus_conditions(status: TrainingJobStatus) -> tuple[tuple[str, ConditionStatus, str, str], ...]:
    """(type, status, reason, message) of Ready, Reconciling and Stalled for `status` as the pass left it."""
    phase = status.phase
    if phase == Phase.FAILED:
        reason, message = _said(status, ConditionType.FAILED, Reason.JOB_FINISHED, "job failed")
        return ((ConditionType.READY, "False", reason, message),
                (ConditionType.RECONCILING, "False", Reason.JOB_FINISHED, "job failed"),
                (ConditionType.STALLED, "True", reason, message))
    if phase in (Phase.SUCCEEDED, Phase.SUSPENDED):
        type_ = ConditionType.SUCCEEDED if phase == Phase.SUCCEEDED else ConditionType.SUSPENDED
        reason, message = _said(status, type_, Reason.JOB_FINISHED, f"job {phase.value.lower()}")
        return ((ConditionType.READY, "True", reason, message),
                (ConditionType.RECONCILING, "False", reason, message),
                (ConditionType.STALLED, "False", reason, message))
    reason, message = _said(status, ConditionType.RUNNING, Reason.CREATING_PODS, "the job's pods are being created")
    progress = f"{(phase or Phase.PENDING).value}: {message}"
    return ((ConditionType.READY, "Unknown", reason, progress),
            (ConditionType.RECONCILING, "True", reason, progress),
            (ConditionType.STALLED, "False", reason, progress))


def mark_kstatus(status: TrainingJobStatus, *, now: datetime, generation: int | None) -> None:
    """Set Ready, Reconciling and Stalled on `status` (in place), last, once every other condition is set."""
    for type_, value, reason, message in kstatus_conditions(status):
        set_condition(status.conditions, type_, value, reason, message, now=rfc3339(now), generation=generation)
