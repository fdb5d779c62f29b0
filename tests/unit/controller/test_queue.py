from __future__ import annotations

import asyncio

import pytest

from multinode.controller.queue import WorkQueue


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=5))


def test_duplicate_adds_coalesce_into_one_item() -> None:
    async def scenario():
        q = WorkQueue()
        for _ in range(100):
            q.add("ns/job")
        assert len(q) == 1
        assert await q.get() == "ns/job"
        assert len(q) == 0

    run(scenario())


def test_key_marked_dirty_while_processing_runs_again_once_afterwards() -> None:
    async def scenario():
        q = WorkQueue()
        q.add("a")
        key = await q.get()
        q.add("a")
        q.add("a")
        assert len(q) == 0, "must not be handed to a second worker while processing"
        q.done(key)
        assert len(q) == 1
        assert await q.get() == "a"
        q.done("a")
        assert len(q) == 0

    run(scenario())


def test_delayed_add_fires_later_and_earliest_request_wins() -> None:
    async def scenario():
        q = WorkQueue()
        loop = asyncio.get_running_loop()
        start = loop.time()
        q.add("a", delay=5.0)
        q.add("a", delay=0.05)  # earlier: replaces the 5 s timer
        q.add("a", delay=1.0)  # later than the pending one: ignored
        assert await q.get() == "a"
        assert 0.04 <= loop.time() - start < 0.9

    run(scenario())


def test_forget_cancels_a_pending_retry() -> None:
    async def scenario():
        q = WorkQueue()
        q.add("a", delay=0.05)
        q.forget("a")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(q.get(), timeout=0.2)

    run(scenario())


def test_a_rest_after_processing_folds_the_events_meanwhile_into_one_later_run() -> None:
    async def scenario():
        q = WorkQueue()
        loop = asyncio.get_running_loop()
        q.add("big")
        key = await q.get()
        q.add("big")  # its pods changed while it was reconciled
        start = loop.time()
        q.done(key, rest=0.1)
        for _ in range(50):  # more pod events during the rest
            q.add("big")
        q.add("small")  # other keys are not held up
        assert await q.get() == "small"
        assert await q.get() == "big"
        assert loop.time() - start >= 0.09
        assert len(q) == 0, "the events during the rest ran as one"

    run(scenario())


def test_no_rest_without_news() -> None:
    async def scenario():
        q = WorkQueue()
        q.add("a")
        key = await q.get()
        q.done(key, rest=5.0)  # nothing happened meanwhile: no timer, an event runs it at once
        assert len(q) == 0
        q.add("a")
        assert await q.get() == "a"

    run(scenario())
