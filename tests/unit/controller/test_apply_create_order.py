"""The order of a new job's creates: its Service and its attempt's ConfigMap go out together, the pods only once
both are made (a pod reads the ConfigMap through envFrom)."""

from __future__ import annotations

import asyncio

import pytest

from multinode.controller.kube import ApiError
from multinode.controller.settings import OperatorSettings
from multinode.controller.reconciler import Reconciler
from multinode.testing import stored_job
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.filled_stores import filled_stores, writes_at_once

KEY = ("ml", "llama")
BOTH_IN_FLIGHT_TIMEOUT_SECONDS = 5.0


class GatedKube(FakeKube):
    """Holds every Service and ConfigMap create until both kinds are in flight; records when each create
    starts and ends."""

    def __init__(self, refuse: str | None = None) -> None:
        super().__init__()
        self.refuse = refuse  # a kind whose create fails with a server error (retried)
        self.log: list[tuple[str, str]] = []  # ("start" | "end", kind)
        self.in_flight: set[str] = set()
        self.changed = asyncio.Condition()

    async def create(self, namespace: str, body: dict) -> None:
        kind = body["kind"]
        self.log.append(("start", kind))
        if kind in ("Service", "ConfigMap"):
            async with self.changed:
                self.in_flight.add(kind)
                self.changed.notify_all()
                await asyncio.wait_for(self.changed.wait_for(lambda: {"Service", "ConfigMap"} <= self.in_flight),
                                       BOTH_IN_FLIGHT_TIMEOUT_SECONDS)
        if kind == self.refuse:
            raise ApiError(f"create_{kind}", 500, "Internal Server Error", f"{kind} refused")
        await super().create(namespace, body)
        self.log.append(("end", kind))


def reconcile(kube: GatedKube) -> None:
    stores = filled_stores(stored_job(2).model_dump(by_alias=True, exclude_none=True, mode="json"))
    reconciler = Reconciler(kube, OperatorSettings(), stores)  # type: ignore[arg-type]  # a fake KubeApi
    asyncio.run(reconciler.reconcile(KEY))


def test_the_service_and_the_attempts_configmap_are_in_flight_together_and_the_pods_follow_both() -> None:
    kube = GatedKube()
    reconcile(kube)  # one after the other, neither create would ever return (wait_for's timeout)
    first_pod = kube.log.index(("start", "Pod"))
    assert {("end", "Service"), ("end", "ConfigMap")} <= set(kube.log[:first_pod]), kube.log
    assert sorted(name for kind, name in kube.made if kind == "Pod") == ["llama-0-a0", "llama-1-a0"]


@pytest.mark.parametrize("refused", ["Service", "ConfigMap"])
def test_either_refused_stops_the_pods_and_is_raised_for_the_retry(refused: str) -> None:
    kube = GatedKube(refuse=refused)
    with pytest.raises(ApiError, match=f"{refused} refused"):
        reconcile(kube)
    assert ("start", "Pod") not in kube.log, kube.log


class HeldEventsKube(FakeKube):
    """Every Event's post waits for `release`; records the order of status patches and posts."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.writes: list[str] = []

    async def patch_job_status(self, namespace: str, name: str, status: dict) -> str | None:
        version = await super().patch_job_status(namespace, name, status)
        self.writes.append(f"status {status.get('phase')}")
        return version

    async def post_event(self, job_meta: dict, event_type: str, reason: str, message: str) -> None:
        await self.release.wait()
        self.writes.append(f"event {reason}")


def test_a_phase_changes_event_is_posted_after_its_status_without_holding_the_reconcile() -> None:
    async def main() -> list[str]:
        kube = HeldEventsKube()
        stores = filled_stores(stored_job(2).model_dump(by_alias=True, exclude_none=True, mode="json"))
        reconciler = Reconciler(kube, writes_at_once(), stores)  # type: ignore[arg-type]  # a fake KubeApi
        # Returns while the event's post waits (held, it would never return: wait_for's timeout).
        await asyncio.wait_for(reconciler.reconcile(KEY), BOTH_IN_FLIGHT_TIMEOUT_SECONDS)
        assert kube.writes == ["status Pending"]
        kube.release.set()
        await asyncio.wait_for(asyncio.gather(*reconciler.applier.posting), BOTH_IN_FLIGHT_TIMEOUT_SECONDS)
        return kube.writes

    assert asyncio.run(main()) == ["status Pending", "event CreatingPods"]
