"""The periodic re-list (controller/resync.py): which jobs it calls missed, what it does about them, and what
it leaves alone. The real apiserver's side (a watch event really lost) is in
tests/integration/controller/test_lost_events.py."""

from __future__ import annotations

import asyncio

from multinode.controller.resync import DELETED, MISSING, UNRECONCILED, JobResync, stale
from multinode.controller.reconciler import Reconciler
from multinode.controller.stores import Stores
from multinode.metrics.operator import OperatorMetrics
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.filled_stores import writes_at_once


def job(name: str, *, generation: int = 1, status: dict | None = None, namespace: str = "ml") -> dict:
    body = {"apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                         "generation": generation},
            "spec": {"numNodes": 1, "image": "registry/train:1"}}
    if status is not None:
        body["status"] = status
    return body


class ListingKube(FakeKube):
    """LISTs answer from `self.jobs` (what the apiserver holds); every write is recorded."""

    def __init__(self, jobs: list[dict]) -> None:
        super().__init__(lambda namespace, body: None)
        self.jobs = jobs
        self.listed: list[str | None] = []

    async def list_jobs(self, namespace: str | None) -> list[dict]:
        self.listed.append(namespace)
        return [j for j in self.jobs if namespace in (None, j["metadata"]["namespace"])]

    async def get_job_uid(self, namespace: str, name: str) -> str | None:
        return next((j["metadata"]["uid"] for j in self.jobs
                     if (j["metadata"]["namespace"], j["metadata"]["name"]) == (namespace, name)), None)


class Setup:
    def __init__(self, apiserver: list[dict], indexed: list[dict] = (), namespaces: tuple[str | None, ...] = (None,)):
        self.kube = ListingKube(apiserver)
        stores = Stores()
        self.jobs = stores.jobs
        for body in indexed:
            self.file(body)
        self.metrics = OperatorMetrics()
        self.r = Reconciler(self.kube, writes_at_once(), stores)  # type: ignore[arg-type]  # a fake KubeApi
        self.resync = JobResync(self.kube, lambda: list(namespaces), self.jobs, self.r,  # type: ignore[arg-type]
                                self.metrics, period_seconds=60)

    def file(self, body: dict) -> None:
        self.jobs.file(body)

    def passes(self, count: int) -> list[list]:
        async def run() -> list[list]:
            return [await self.resync.resync() for _ in range(count)]
        return asyncio.run(run())

    def counted(self, reason: str) -> float:
        return self.metrics.registry.get_sample_value("multinode_jobs_found_by_resync_total", {"reason": reason}) or 0


def test_stale_means_no_status_or_one_for_an_older_generation() -> None:
    assert stale(job("a"))
    assert stale(job("a", generation=2, status={"observedGeneration": 1, "phase": "Running"}))
    assert not stale(job("a", generation=2, status={"observedGeneration": 2, "phase": "Running"}))


def test_a_job_the_index_never_got_is_found_on_the_second_pass_filed_and_queued() -> None:
    lost = job("lost")
    s = Setup([lost])
    first, second = s.passes(2)
    assert first == []  # the watch event of a job created a moment ago may still be on its way
    assert second == [(("ml", "lost"), MISSING)]
    assert s.jobs.get(("ml", "lost")) is not None and ("ml", "lost") in s.r.workers.queue
    assert s.counted(MISSING) == 1

    asyncio.run(s.r.reconcile(("ml", "lost")))  # the reconcile it queued gives the job a status
    assert s.kube.statuses and s.kube.statuses[-1]["phase"] == "Pending"


def test_a_job_indexed_but_never_reconciled_at_its_generation_is_found() -> None:
    changed = job("changed", generation=3, status={"observedGeneration": 2, "phase": "Running"})
    s = Setup([changed], indexed=[changed])
    s.r.applier.reconciled[changed["metadata"]["uid"]] = 2  # the spec changed, and that event was lost
    assert s.passes(2)[1] == [(("ml", "changed"), UNRECONCILED)]
    assert ("ml", "changed") in s.r.workers.queue and s.counted(UNRECONCILED) == 1


def test_jobs_the_operator_has_in_hand_are_left_alone() -> None:
    current = job("current", status={"observedGeneration": 1, "phase": "Running"})
    written = job("written")  # reconciled at generation 1; its status patch is not in the LIST yet
    queued = job("queued")
    s = Setup([current, written, queued], indexed=[current, written, queued])
    s.r.applier.reconciled[written["metadata"]["uid"]] = 1
    s.r.workers.queue._queued.add(("ml", "queued"))  # a retry or a namespace not listed yet: its reconcile is coming
    assert s.passes(3) == [[], [], []]
    assert s.metrics.registry.get_sample_value("multinode_jobs_found_by_resync_total", {"reason": MISSING}) is None


def test_a_job_missed_once_then_seen_by_its_event_is_not_counted() -> None:
    late = job("late")
    s = Setup([late])
    assert s.passes(1) == [[]]
    s.file(late)  # its watch event came after the first LIST
    s.r.applier.reconciled[late["metadata"]["uid"]] = 1  # and it was reconciled
    assert s.passes(1) == [[]]


def test_a_job_gone_from_the_apiserver_whose_deletion_was_missed_is_forgotten() -> None:
    gone, kept = job("gone", status={"observedGeneration": 1}), job("kept", status={"observedGeneration": 1})
    s = Setup([kept], indexed=[gone, kept])
    s.r.applier.reconciled[gone["metadata"]["uid"]] = 1
    first, second = s.passes(2)
    assert first == [] and second == [(("ml", "gone"), DELETED)]
    assert s.jobs.get(("ml", "gone")) is None and s.jobs.get(("ml", "kept")) is not None
    assert gone["metadata"]["uid"] not in s.r.applier.reconciled and s.counted(DELETED) == 1


def test_a_job_absent_from_two_lists_but_still_there_is_kept() -> None:
    # Created after the LIST began, twice in a row (or listed from a lagging cache): the GET has the last word.
    raced = job("raced", status={"observedGeneration": 1})
    s = Setup([raced], indexed=[raced])
    s.kube.list_jobs = lambda namespace: asyncio.sleep(0, result=[])  # type: ignore[method-assign]
    assert s.passes(3) == [[], [], []]
    assert s.jobs.get(("ml", "raced")) is not None


def test_only_the_followed_namespaces_are_listed_and_judged() -> None:
    elsewhere = job("theirs", namespace="other", status={"observedGeneration": 1})
    s = Setup([job("mine", namespace="team-a")], indexed=[elsewhere], namespaces=("team-a", "team-b"))
    found = s.passes(2)
    assert s.kube.listed == ["team-a", "team-b"] * 2
    assert found[1] == [(("team-a", "mine"), MISSING)]  # and the index's job of an unfollowed namespace stays
    assert s.jobs.get(("other", "theirs")) is not None


def test_a_job_forgotten_while_its_reconcile_writes_leaves_no_phase_counted() -> None:
    # The full run's race: the re-list forgets a deleted job while a reconcile of it (its pods going, say) is
    # between its status patch and its bookkeeping. The phase that reconcile records must not outlive the job.
    deleted = job("deleted")
    s = Setup([], indexed=[deleted])
    uid = deleted["metadata"]["uid"]

    async def patch_as_the_job_is_forgotten(namespace: str, name: str, status: dict) -> None:
        s.jobs.remove(uid)
        s.r.forget((namespace, name), uid)
        return None  # the job is gone

    s.kube.patch_job_status = patch_as_the_job_is_forgotten  # type: ignore[method-assign]
    asyncio.run(s.r.reconcile(("ml", "deleted")))
    assert uid not in s.r.applier.phases and uid not in s.r.applier.written and uid not in s.r.applier.reconciled
    assert ("ml", "deleted") not in s.r.workers.queue
