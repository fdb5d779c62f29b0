"""KubeApi's answer to 429 (priority and fairness shedding load): wait the Retry-After, send again.

The local cluster's apiserver does not throttle a handful of requests, so the HTTP layer is a fake here
(tests/integration/controller/test_api_faults.py injects 429s through a proxy in front of a real one)."""

from __future__ import annotations

import asyncio

import pytest

from multinode.controller.kube import MAX_RETRY_AFTER_SECONDS, MAX_THROTTLED_RETRIES, ApiError, retry_after_seconds
from tests.unit.controller.fake_http import Pool, Response, kube_with


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}


def test_a_throttled_create_waits_the_retry_after_and_is_sent_again() -> None:
    pool = Pool([Response(429, {"Retry-After": "1"}), Response(429, {"Retry-After": "2"}), Response(201)])
    kube, slept, errors = kube_with(pool)
    asyncio.run(kube.create("ns", POD))
    assert slept == [1.0, 2.0]
    assert len(pool.sent) == 3 and len({body for _, _, body in pool.sent}) == 1, "the same request each time"
    assert errors == [("create_namespaced_pod", "429")] * 2, "each throttle is counted"


def test_throttled_too_often_it_is_an_api_error_for_the_reconciles_backoff() -> None:
    pool = Pool([Response(429, {"Retry-After": "1"}) for _ in range(MAX_THROTTLED_RETRIES + 1)])
    kube, slept, _ = kube_with(pool)
    with pytest.raises(ApiError) as raised:
        asyncio.run(kube.create("ns", POD))
    assert raised.value.status == 429
    assert len(pool.sent) == MAX_THROTTLED_RETRIES + 1 and len(slept) == MAX_THROTTLED_RETRIES


def test_other_refusals_are_not_retried_here() -> None:
    pool = Pool([Response(409, reason="Conflict")])
    kube, slept, _ = kube_with(pool)
    with pytest.raises(ApiError):
        asyncio.run(kube.create("ns", POD))
    assert len(pool.sent) == 1 and slept == []


@pytest.mark.parametrize(("header", "throttled", "seconds"), [
    ("3", 0, 3.0), ("0", 2, 0.0), (None, 0, 0.25), (None, 3, 2.0), ("soon", 1, 0.5),
    ("3600", 0, MAX_RETRY_AFTER_SECONDS), (None, 30, MAX_RETRY_AFTER_SECONDS),
])
def test_retry_after(header: str | None, throttled: int, seconds: float) -> None:
    assert retry_after_seconds(header, throttled) == seconds
