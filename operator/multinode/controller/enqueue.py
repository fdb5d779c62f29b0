"""What the event side (watches.py, resync.py, handlers.py) may ask of the reconciler: a small interface, so
the watches depend on it and not on the Reconciler class (reconciler.py implements it; tests fake it)."""

from __future__ import annotations

from typing import Protocol

from multinode.controller.stores import JobKey


class Enqueue(Protocol):
    def enqueue(self, key: JobKey, delay: float = 0.0) -> None:
        """Reconcile job `key`, now or after `delay` seconds (reconciles of one job are folded together)."""

    def forget(self, key: JobKey, uid: str | None) -> None:
        """The job is gone: drop whatever is kept of it."""

    def pod_seen(self, key: JobKey, name: str) -> None:
        """A watch event of the job's pod `name` arrived: the pod store has it (or its deletion)."""

    def pod_gone(self, key: JobKey, name: str, disruption: str) -> None:
        """The job's pod `name` was deleted by a disruption (its DisruptionTarget reason)."""

    def own_status_write(self, uid: str, resource_version: str) -> bool:
        """This version of job `uid` is the operator's own last status patch: it holds nothing its reconcile
        did not already know (only status changed, to what the reconcile wrote)."""


class ResyncTarget(Enqueue, Protocol):
    """...and what the periodic re-list (resync.py) checks before it calls a job missed."""

    def busy(self, key: JobKey) -> bool:
        """Queued, being reconciled, or waiting for a timer: this job's next reconcile is already coming."""

    def reconciled_generation(self, uid: str) -> int | None:
        """The generation job `uid` was last planned at (None: not since this operator started)."""
