"""A create refused with 409 counts as done only when the object already there is the job's own.

The apiserver's 409 says only that the name is taken. The operator then reads that object (one GET, only
after a refused create) and compares its controlling owner with the job's uid (reconcile/ownership.py).
Its own object (made by an earlier reconcile or operator) is used as before; any other raises
ForeignObject, which the reconcile turns into the job's ForeignObject condition (reconcile/refusals.py).
"""

from __future__ import annotations

from multinode.controller.kube import KubeApi
from multinode.controller.kube_calls import ApiError
from multinode.reconcile.refusals import counts_as_created
from multinode.reconcile.ownership import controller_uid, foreign_object_message


class ForeignObject(Exception):
    """An object under a name the job needs belongs to someone else; `message` says which and whose."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


async def claim_existing(kube: KubeApi, namespace: str, body: dict, job_uid: str) -> None:
    """`body`'s create got 409: return if the object there is controlled by the job `job_uid`, raise
    ForeignObject if not (an ApiError if it cannot be read: the reconcile is retried)."""
    meta = await kube.read_metadata(namespace, body)
    if controller_uid(meta) != job_uid:
        raise ForeignObject(foreign_object_message(body["kind"], namespace, body["metadata"]["name"], meta))


async def create_or_claim(kube: KubeApi, namespace: str, body: dict, job_uid: str) -> None:
    """Create `body`; if its name is taken (409), make sure the object there is the job's (claim_existing)."""
    try:
        await kube.create(namespace, body)
    except ApiError as e:
        if not counts_as_created(e.status):
            raise
        await claim_existing(kube, namespace, body, job_uid)
