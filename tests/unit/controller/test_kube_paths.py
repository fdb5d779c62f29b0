"""Names from a job's spec go into request paths as one quoted segment: none reaches another path."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.unit.controller.fake_http import Pool, Response, kube_with

PRIORITY_CLASSES = "https://apiserver/apis/scheduling.k8s.io/v1/priorityclasses/"


def test_a_priority_class_name_is_one_quoted_segment_of_the_path() -> None:
    pool = Pool([Response(200, data=json.dumps({"value": 7}).encode()), Response(404, reason="NotFound")])
    kube, _, _ = kube_with(pool)
    assert asyncio.run(kube.priority_class_value("training-high")) == 7
    # Stored before the CRD checked it: urllib3 would resolve the '..' and read a Secret instead.
    assert asyncio.run(kube.priority_class_value("../../../api/v1/namespaces/kube-system/secrets/x?watch=1")) is None
    assert [url for _, url, _ in pool.sent] == [
        PRIORITY_CLASSES + "training-high",
        PRIORITY_CLASSES + "..%2F..%2F..%2Fapi%2Fv1%2Fnamespaces%2Fkube-system%2Fsecrets%2Fx%3Fwatch%3D1"]


@pytest.mark.parametrize("name", [".", ".."])
def test_a_dot_segment_is_no_name(name: str) -> None:
    kube, _, _ = kube_with(Pool([]))
    with pytest.raises(ValueError, match="is not an object name"):
        asyncio.run(kube.priority_class_value(name))
