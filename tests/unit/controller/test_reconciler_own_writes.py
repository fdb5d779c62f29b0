"""The operator knows its own status patch when the watch brings it back (watches.job_event skips it), and
queues the job again only when the pass that echo would have made adds something (reconcile/follow_up.py)."""

from __future__ import annotations

import asyncio

from multinode.controller.reconciler import Reconciler
from multinode.controller.settings import OperatorSettings
from multinode.reconcile import ObservedPod
from multinode.reconcile.ownership import OwnedName
from multinode.testing import stored_job
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.filled_stores import filled_stores, writes_at_once

KEY = ("ml", "llama")


def test_the_version_a_status_patch_made_is_the_operators_own_until_the_job_is_forgotten() -> None:
    raw = stored_job(2).model_dump(by_alias=True, exclude_none=True, mode="json")
    uid = raw["metadata"]["uid"]
    kube = FakeKube()
    reconciler = Reconciler(kube, writes_at_once(), filled_stores(raw))  # type: ignore[arg-type]  # a fake KubeApi
    assert not reconciler.own_status_write(uid, "1")
    asyncio.run(reconciler.reconcile(KEY))
    assert len(kube.statuses) == 1  # FakeKube answers the first patch with resourceVersion "1"
    assert reconciler.own_status_write(uid, "1")
    assert not reconciler.own_status_write(uid, "2") and not reconciler.own_status_write("another-uid", "1")
    assert not reconciler.own_status_write(uid, "")
    reconciler.forget(KEY, uid)
    assert not reconciler.own_status_write(uid, "1")


def _queued(reconciler: Reconciler) -> bool:
    """Queued to run now (a timer the plan asked for, for later, is not the echo's pass)."""
    return reconciler.workers.queue.ready(KEY)


def test_a_status_write_whose_next_pass_would_add_nothing_queues_nothing() -> None:
    # A new job: its pods are created and its status written; planned again, it would only ask for the
    # same pods (in flight), so the skipped echo loses nothing and the job is not queued again.
    raw = stored_job(2).model_dump(by_alias=True, exclude_none=True, mode="json")
    kube = FakeKube()
    reconciler = Reconciler(kube, writes_at_once(), filled_stores(raw))  # type: ignore[arg-type]  # a fake KubeApi
    asyncio.run(reconciler.reconcile(KEY))
    assert len(kube.statuses) == 1 and not _queued(reconciler)


def test_a_job_its_pass_marked_succeeded_is_queued_again_for_its_ttl() -> None:
    # The pass that marks a job Succeeded writes its completion time; the TTL deletes it in the pass after,
    # which the echo of that write no longer brings: the follow-up check queues it instead.
    raw = stored_job(2, ttlSecondsAfterFinished=0).model_dump(by_alias=True, exclude_none=True, mode="json")
    raw["status"] = {"phase": "Running", "attempt": 0, "numNodes": 2, "startTime": "2026-11-20T11:00:00Z",
                     "attemptStartTime": "2026-11-20T11:00:00Z"}
    pods = [ObservedPod(name=f"llama-{i}-a0", job_name="llama", index=i, attempt=0, phase="Succeeded",
                        node=f"gpu-node-{i}", owner_uid=raw["metadata"]["uid"]) for i in range(2)]
    kube = FakeKube()
    stores = filled_stores(raw, pods=pods, services=[OwnedName("llama", raw["metadata"]["uid"])])
    reconciler = Reconciler(kube, OperatorSettings(), stores)  # type: ignore[arg-type]  # a fake KubeApi
    asyncio.run(reconciler.reconcile(KEY))
    assert kube.statuses and kube.statuses[-1]["phase"] == "Succeeded"
    assert _queued(reconciler), "the TTL's pass must come although the echo is skipped"
