"""KubeApi's answer to 429 (priority and fairness shedding load): wait the Retry-After, send again.

The local cluster's apiserver does not throttle a handful of requests, so the HTTP layer is a fake here
(tests/integration/controller/test_api_faults.py injects 429s through a proxy in front of a real one)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from multinode.controller.kube import MAX_RETRY_AFTER_SECONDS, MAX_THROTTLED_RETRIES, ApiError, KubeApi, \
    retry_after_seconds


@dataclass
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    data: bytes = b"{}"


class Pool:
    """Answers each request with the next of `answers`, recording what was sent."""

    def __init__(self, answers: list[Response]):
        self.answers = answers
        self.sent: list[tuple[str, str, bytes | None]] = []

    def request(self, method: str, url: str, body: bytes | None = None, **_: Any) -> Response:
        self.sent.append((method, url, body))
        return self.answers.pop(0)


def kube_with(pool: Pool) -> tuple[KubeApi, list[float], list[tuple[str, str]]]:
    configuration = SimpleNamespace(host="https://apiserver", auth_settings=dict)
    api_client = SimpleNamespace(configuration=configuration, rest_client=SimpleNamespace(pool_manager=pool))
    errors: list[tuple[str, str]] = []
    kube = KubeApi(api_client, 2, on_error=lambda op, code: errors.append((op, code)))  # type: ignore[arg-type]
    slept: list[float] = []
    kube._sleep = slept.append
    return kube, slept, errors


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
