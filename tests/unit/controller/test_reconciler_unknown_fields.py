"""A job stored under a CRD newer than the operator: reconciled as usual, its new spec fields named in a
warning once per generation, never failed for them."""

from __future__ import annotations

import asyncio
import logging

import pytest

from multinode.controller.reconciler import Reconciler
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.filled_stores import filled_stores, writes_at_once
from multinode.testing import stored_job

KEY = ("ml", "llama")


def test_fields_of_a_newer_crd_are_named_once_per_generation_and_the_job_still_runs(
        caplog: pytest.LogCaptureFixture) -> None:
    raw = stored_job(2).model_dump(by_alias=True, exclude_none=True, mode="json")
    raw["metadata"]["generation"] = 1
    raw["spec"]["laterFeature"] = {"enabled": True}
    raw["spec"]["resourcesPerNode"]["gpuPartition"] = "1g.10gb"
    created: list[str] = []
    kube = FakeKube(lambda namespace, body: created.append(body["metadata"]["name"]))
    reconciler = Reconciler(kube, writes_at_once(), filled_stores(raw))  # type: ignore[arg-type]
    caplog.set_level(logging.WARNING, logger="multinode.controller")

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if "unknown to this operator" in r.getMessage()]

    asyncio.run(reconciler.reconcile(KEY))
    asyncio.run(reconciler.reconcile(KEY))
    assert len(created) == 2, "both node pods are created"
    assert kube.statuses and all(s.get("phase") != "Failed" for s in kube.statuses)
    [warning] = warnings()
    assert warning.startswith("ml/llama: spec.resourcesPerNode.gpuPartition, spec.laterFeature unknown to this "
                              "operator")
    raw["metadata"]["generation"] = 2  # an edit: said again
    asyncio.run(reconciler.reconcile(KEY))
    assert len(warnings()) == 2
