"""What the apiserver's refusal of a create means for the job, decided from its HTTP status alone.

The controller's client (controller/kube.py) only reports the status and the apiserver's message; the
decisions are here, as pure functions, so they are tested with plain values:

- 409 AlreadyExists: a previous operator (or this one, before the pod index caught up) created it; the
  object exists, which is all a create wants, if it is the job's own: the controller reads the object and
  checks its owner (controller/ownership.py). One that is not the job's is `foreign_object_found`: the job
  says which object is in the way (ForeignObject) and the create is retried with backoff.
- 403 Forbidden: the cluster may change (a missing PriorityClass or ServiceAccount, a quota), so the job
  says why and the create is retried with backoff.
- 400/422 Invalid: a passed-through volume, affinity or valueFrom of the wrong shape or with an unknown
  field (strict field validation refuses it). A manifest rendered from an admitted spec will not get
  better, so the job fails with the apiserver's message, which names the field.
- a refusal an integration reads (reconcile/integration.py `refusal`): a 404 on a gang scheduler's PodGroup
  (its CRD is not installed: GangSchedulerNotInstalled) or on a Kueue Workload (KueueNotInstalled). The job
  says so and the create is retried with backoff, so installing the CRD is enough.
- anything else (5xx, a timeout, a broken connection): retried with backoff, the job's status untouched.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from http import HTTPStatus

from multinode.api import TrainingJob
from multinode.api.base import deep_copied
from multinode.api.conditions import ConditionType, Reason
from multinode.api.timestamps import rfc3339
from multinode.reconcile.conditions import set_condition
from multinode.reconcile.integration import Integration
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import Plan
from multinode.reconcile.status_report import fail_job


class Refusal(enum.Enum):
    ALREADY_EXISTS = "AlreadyExists"
    FORBIDDEN = "Forbidden"
    INVALID = "Invalid"
    TRANSIENT = "Transient"


def classify(status: int | None) -> Refusal:
    """`status`: the HTTP status of the refusal, None when no answer came."""
    if status == HTTPStatus.CONFLICT:
        return Refusal.ALREADY_EXISTS
    if status == HTTPStatus.FORBIDDEN:
        return Refusal.FORBIDDEN
    if status in (HTTPStatus.BAD_REQUEST, HTTPStatus.UNPROCESSABLE_ENTITY):
        return Refusal.INVALID
    return Refusal.TRANSIENT


def counts_as_created(status: int | None) -> bool:
    """Whether a refused create left the object in place all the same (None: no answer came, so no)."""
    return classify(status) is Refusal.ALREADY_EXISTS


@dataclass(frozen=True)
class RefusedCreation:
    """What to do after a refused create: write `plan`'s status (None: write nothing), then, if `retry`,
    hand the error back to the worker, which retries the job with backoff."""

    plan: Plan | None
    retry: bool


def _with_conditions(job: TrainingJob, result: Plan, *types: str, reason: str, message: str,
                     now: datetime) -> Plan:
    """A copy of `result` whose status has the conditions `types` False for `reason` (`result` is left as it was)."""
    status = deep_copied(result.status)
    for type_ in types:
        set_condition(status.conditions, type_, "False", reason, message, now=rfc3339(now),
                      generation=job.metadata.generation)
    return replace(result, status=status)


def foreign_object_found(job: TrainingJob, result: Plan, message: str, *, now: datetime) -> RefusedCreation:
    """A create found its name taken by an object that is not the job's (`message` names it): the job uses
    none of it, says so, and the create is retried with backoff."""
    return RefusedCreation(plan=_with_conditions(job, result, ConditionType.RUNNING, reason=Reason.FOREIGN_OBJECT,
                                                 message=message, now=now), retry=True)


def creation_refused(job: TrainingJob, result: Plan, pods: Iterable[ObservedPod], http_status: int | None,
                     message: str, *, now: datetime, api_version: str | None = None,
                     integrations: Iterable[Integration] = ()) -> RefusedCreation:
    """The plan `result` could not create an object (of `api_version`, when known): the apiserver answered
    `http_status` with `message`. The plan to write is a changed copy: `result` is left as it was."""
    for integration in integrations:
        read = integration.refusal(api_version, http_status, message)
        if read is not None:
            return RefusedCreation(plan=_with_conditions(job, result, *read.conditions, reason=read.reason,
                                                         message=read.message, now=now), retry=True)
    refusal = classify(http_status)
    if refusal is Refusal.FORBIDDEN:
        return RefusedCreation(plan=_with_conditions(job, result, ConditionType.RUNNING,
                                                     reason=Reason.POD_CREATION_FORBIDDEN, message=message, now=now),
                               retry=True)
    if refusal is Refusal.INVALID:
        return RefusedCreation(plan=fail_job(result, Reason.POD_CREATION_FAILED, message, now=now, pods=pods),
                               retry=False)
    return RefusedCreation(plan=None, retry=True)
