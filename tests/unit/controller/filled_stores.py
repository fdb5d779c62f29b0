"""Typed stores (controller/stores.py) filled as the watches would, for the Reconciler's unit tests."""

from __future__ import annotations

from collections.abc import Iterable

from multinode.controller.settings import OperatorSettings
from multinode.controller.stores import Stores
from multinode.reconcile import ObservedPod
from multinode.reconcile.ownership import OwnedName


def filled_stores(*jobs: dict, pods: Iterable[ObservedPod] = (), services: Iterable[OwnedName] = (),
                  namespace: str = "ml") -> Stores:
    """Stores holding `jobs` (stored bodies), node pods of `namespace` and Services named after their job."""
    stores = Stores()
    for body in jobs:
        stores.jobs.file(body)
    for pod in pods:
        stores.pods.put_pod(namespace, pod)
    for service in services:
        stores.services.put(namespace, service.name, service, uid=f"{namespace}/service/{service.name}")
    return stores


def writes_at_once() -> OperatorSettings:
    """Settings under which a new job's first status is written by the pass that creates its pods, for tests
    of what follows that write (the wait itself is test_first_status.py's)."""
    return OperatorSettings(first_status_wait_seconds=0)
