"""A new job's first status waits for its pods (reconcile/first_status.py): the pass that creates them writes
no status and posts no Event; the next pass writes both, the one the pods' events bring or, if they are not
seen in time, the one the wait's timer brings."""

from __future__ import annotations

import asyncio

import pytest

from multinode.controller.reconciler import Reconciler
from multinode.controller.settings import OperatorSettings
from multinode.reconcile import ObservedPod
from multinode.testing import stored_job
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.filled_stores import filled_stores

KEY = ("ml", "llama")
SHORT_WAIT_SECONDS = 0.2
TIMER_TIMEOUT_SECONDS = 5.0


class EventsKube(FakeKube):
    """Records the reasons of the Events posted."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    async def post_event(self, job_meta: dict, event_type: str, reason: str, message: str) -> None:
        self.events.append(reason)


def new_job() -> dict:
    return stored_job(2).model_dump(by_alias=True, exclude_none=True, mode="json")


def pods_seen(raw: dict) -> list[ObservedPod]:
    """The job's two pods as the pod watch files them once they are created (not scheduled yet)."""
    return [ObservedPod(name=f"llama-{i}-a0", job_name="llama", index=i, attempt=0, phase="Pending",
                        owner_uid=raw["metadata"]["uid"]) for i in range(2)]


def created_condition(status: dict) -> tuple[str, str]:
    created = next(c for c in status["conditions"] if c["type"] == "Created")
    return created["status"], created["message"]


def test_the_pass_that_sees_a_new_jobs_pods_writes_the_status_the_creating_pass_held() -> None:
    async def main() -> None:
        raw, kube = new_job(), EventsKube()
        stores = filled_stores(raw)
        reconciler = Reconciler(kube, OperatorSettings(), stores)  # type: ignore[arg-type]  # a fake KubeApi
        await reconciler.reconcile(KEY)
        assert [name for kind, name in kube.made if kind == "Pod"] == ["llama-0-a0", "llama-1-a0"]
        assert kube.statuses == [] and kube.events == []
        assert KEY in reconciler.workers.queue, "the wait's timer must bring a pass that writes it"
        for pod in pods_seen(raw):
            stores.pods.put_pod("ml", pod)
        await reconciler.reconcile(KEY)
        await asyncio.gather(*reconciler.applier.posting)
        [status] = kube.statuses
        assert created_condition(status) == ("True", "2/2 pods created")
        assert status["phase"] == "Pending" and status["nodeCounts"]["pending"] == 2
        assert kube.events == ["CreatingPods"], "the held pass's phase Event, after the status"

    asyncio.run(main())


def test_a_first_status_whose_pods_are_not_seen_in_time_is_written_by_the_timers_pass() -> None:
    async def main() -> None:
        raw, kube = new_job(), EventsKube()
        settings = OperatorSettings(first_status_wait_seconds=SHORT_WAIT_SECONDS)
        reconciler = Reconciler(kube, settings, filled_stores(raw))  # type: ignore[arg-type]  # a fake KubeApi
        await reconciler.reconcile(KEY)
        assert kube.statuses == [] and not reconciler.workers.queue.ready(KEY)
        queue = reconciler.workers.queue
        assert await asyncio.wait_for(queue.get(), TIMER_TIMEOUT_SECONDS) == KEY  # the wait's timer queued it
        await reconciler.reconcile(KEY)
        queue.done(KEY)
        [status] = kube.statuses
        assert status["phase"] == "Pending" and created_condition(status) == ("False", "0/2 pods created")
        assert len([name for kind, name in kube.made if kind == "Pod"]) == 2, "no pod is created twice"

    asyncio.run(main())


def test_a_job_with_a_status_already_is_written_at_once() -> None:
    # The server has its status (an operator restarted after writing it, its pods gone since): the pass that
    # creates them again writes at once.
    raw, kube = new_job(), EventsKube()
    raw["status"] = {"phase": "Pending", "attempt": 0}
    reconciler = Reconciler(kube, OperatorSettings(), filled_stores(raw))  # type: ignore[arg-type]  # a fake KubeApi
    asyncio.run(reconciler.reconcile(KEY))
    assert len(kube.statuses) == 1


def test_a_job_deleted_while_its_first_status_waits_leaves_nothing_held() -> None:
    raw, kube = new_job(), EventsKube()
    reconciler = Reconciler(kube, OperatorSettings(), filled_stores(raw))  # type: ignore[arg-type]  # a fake KubeApi
    asyncio.run(reconciler.reconcile(KEY))
    uid = raw["metadata"]["uid"]
    assert reconciler.applier.last_status(uid) is not None
    reconciler.forget(KEY, uid)
    assert reconciler.applier.last_status(uid) is None and kube.statuses == []


def test_a_negative_wait_is_refused() -> None:
    with pytest.raises(ValueError, match="first_status_wait_seconds"):
        OperatorSettings(first_status_wait_seconds=-1)
