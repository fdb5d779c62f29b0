"""The workers (controller/workers.py): a failed reconcile is retried with a growing delay, and a job's
count of failures starts again after one that succeeds."""

from __future__ import annotations

import asyncio

import pytest

from multinode.controller.kube import ApiError
from multinode.controller.workers import Workers, retry_delay
from multinode.metrics.operator import OperatorMetrics

KEY = ("ml", "llama")


def test_the_retry_delay_doubles_from_half_a_second_up_to_the_limit() -> None:
    assert [retry_delay(n, 5.0) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 5.0]


def test_a_failing_reconcile_is_retried_later_and_its_failures_forgotten_once_it_succeeds(
        caplog: pytest.LogCaptureFixture) -> None:
    outcomes = [ApiError("create_namespaced_pod", 503, "Service Unavailable", "busy"), None]
    reconciled = asyncio.Event()

    async def reconcile(key: tuple[str, str]) -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        reconciled.set()

    async def main() -> None:
        workers = Workers(reconcile, count=1, max_retry_delay=0.01, metrics=OperatorMetrics())
        workers.start()
        workers.queue.add(KEY)
        await asyncio.wait_for(reconciled.wait(), timeout=5)
        assert workers._failures == {}
        await workers.stop()
    asyncio.run(main())
    assert outcomes == []
    assert [r.getMessage() for r in caplog.records if "failed" in r.getMessage()] == [
        "reconcile of ml/llama failed (1 in a row), retrying in 0.0s: busy"]
