"""Expectations: a pod the operator just created is not created again while the pod index lags."""

from __future__ import annotations

import asyncio

from multinode.controller import apply
from multinode.controller.settings import OperatorSettings
from multinode.controller.reconciler import Reconciler
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.filled_stores import filled_stores
from multinode.testing import stored_job

KEY = ("ml", "llama")


class RecordingKube(FakeKube):
    def __init__(self) -> None:
        self.created: list[str] = []
        super().__init__(lambda namespace, body: self.created.append(body["metadata"]["name"]))


def reconciler(kube: RecordingKube) -> Reconciler:
    stores = filled_stores(stored_job(3).model_dump(by_alias=True, exclude_none=True, mode="json"))
    return Reconciler(kube, OperatorSettings(), stores)  # type: ignore[arg-type]  # a fake KubeApi


def test_a_second_reconcile_before_the_index_catches_up_creates_nothing() -> None:
    kube = RecordingKube()
    r = reconciler(kube)
    asyncio.run(r.reconcile(KEY))
    assert kube.created == ["llama-0-a0", "llama-1-a0", "llama-2-a0"]

    asyncio.run(r.reconcile(KEY))  # the pod index is still empty
    assert len(kube.created) == 3


def test_a_pod_seen_and_then_gone_is_created_again() -> None:
    kube = RecordingKube()
    r = reconciler(kube)
    asyncio.run(r.reconcile(KEY))
    r.pod_seen(KEY, "llama-1-a0")  # its watch event came (e.g. ADDED then DELETED before it ever ran)
    asyncio.run(r.reconcile(KEY))
    assert kube.created[3:] == ["llama-1-a0"]
    assert set(r.applier.expectations.by_job[KEY]) == {"llama-0-a0", "llama-1-a0", "llama-2-a0"}


def test_an_expectation_is_dropped_once_the_index_has_the_pod() -> None:
    # The watch event can come before the create's response: pod_seen found nothing to drop then.
    from multinode.reconcile import ObservedPod

    kube = RecordingKube()
    r = reconciler(kube)
    asyncio.run(r.reconcile(KEY))
    for i in range(3):  # the watch events arrived
        r.stores.pods.put_pod("ml", ObservedPod(name=f"llama-{i}-a0", job_name="llama", index=i, attempt=0,
                                                phase="Pending", owner_uid="uid-123"))
    asyncio.run(r.reconcile(KEY))
    assert not r.applier.expectations.by_job.get(KEY)
    assert len(kube.created) == 3


def test_an_expectation_never_met_expires(monkeypatch) -> None:
    kube = RecordingKube()
    r = reconciler(kube)
    asyncio.run(r.reconcile(KEY))
    monkeypatch.setattr(apply, "EXPECTATION_TTL_SECONDS", 0.0)
    asyncio.run(r.reconcile(KEY))
    assert len(kube.created) == 6


def test_forgetting_a_job_drops_its_expectations() -> None:
    kube = RecordingKube()
    r = reconciler(kube)
    asyncio.run(r.reconcile(KEY))
    r.forget(KEY, None)
    assert KEY not in r.applier.expectations.by_job


def test_a_big_gang_is_created_as_a_stream_with_bounded_creates_in_flight() -> None:
    # 2 × the API concurrency in flight at most: the rest of the gang is neither rendered nor waiting.
    in_flight, most, created = 0, 0, []

    class SlowKube(FakeKube):
        async def create(self, namespace: str, body: dict) -> None:
            nonlocal in_flight, most
            if body["kind"] != "Pod":
                return
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0)
            created.append(body["metadata"]["name"])
            in_flight -= 1

    stores = filled_stores(stored_job(50).model_dump(by_alias=True, exclude_none=True, mode="json"))
    r = Reconciler(SlowKube(lambda *_: None), OperatorSettings(api_concurrency=4), stores)  # type: ignore[arg-type]
    asyncio.run(r.reconcile(KEY))
    assert sorted(created) == sorted(f"llama-{i}-a0" for i in range(50)) and most == 8


def test_a_disrupted_pod_s_reason_outlives_its_deletion_bounded_and_forgotten_with_the_job() -> None:
    from multinode.controller.observe import MAX_GONE_PER_JOB

    r = reconciler(RecordingKube())
    r.pod_gone(KEY, "llama-0-a0", "PreemptionByScheduler")
    gone = r.observer.disrupted.by_job
    assert gone[KEY] == {"llama-0-a0": "PreemptionByScheduler"}
    for i in range(MAX_GONE_PER_JOB + 5):
        r.pod_gone(KEY, f"llama-{i}-a1", "EvictionByEvictionAPI")
    assert len(gone[KEY]) == MAX_GONE_PER_JOB and "llama-0-a0" not in gone[KEY]
    r.forget(KEY, None)
    assert KEY not in gone


def test_a_job_whose_namespace_is_not_listed_yet_creates_nothing_and_is_looked_at_again() -> None:
    # Its pods may exist (an operator restart); they would all be created again, to get 409s.
    kube = RecordingKube()
    r = reconciler(kube)
    listed: set[str] = set()
    r.namespace_listed = listed.__contains__

    async def main() -> None:
        await r.reconcile(KEY)
        assert kube.created == [] and KEY in r.workers.queue._timers  # requeued, with a delay
        listed.add("ml")
        await r.reconcile(KEY)
    asyncio.run(main())
    assert kube.created == ["llama-0-a0", "llama-1-a0", "llama-2-a0"]
