"""The operator knows its own status patch when the watch brings it back (watches.job_event skips it)."""

from __future__ import annotations

import asyncio

from multinode.controller.reconciler import Reconciler
from multinode.controller.settings import OperatorSettings
from multinode.testing import stored_job
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.filled_stores import filled_stores

KEY = ("ml", "llama")


def test_the_version_a_status_patch_made_is_the_operators_own_until_the_job_is_forgotten() -> None:
    raw = stored_job(2).model_dump(by_alias=True, exclude_none=True, mode="json")
    uid = raw["metadata"]["uid"]
    kube = FakeKube()
    reconciler = Reconciler(kube, OperatorSettings(), filled_stores(raw))  # type: ignore[arg-type]  # a fake KubeApi
    assert not reconciler.own_status_write(uid, "1")
    asyncio.run(reconciler.reconcile(KEY))
    assert len(kube.statuses) == 1  # FakeKube answers the first patch with resourceVersion "1"
    assert reconciler.own_status_write(uid, "1")
    assert not reconciler.own_status_write(uid, "2") and not reconciler.own_status_write("another-uid", "1")
    assert not reconciler.own_status_write(uid, "")
    reconciler.forget(KEY, uid)
    assert not reconciler.own_status_write(uid, "1")
