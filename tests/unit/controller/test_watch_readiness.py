"""controller/watch_readiness.py with kopf's own ToggleSet; kopf's watcher stands in as a coroutine that
does what the real one does to the toggles (the real one, failing on a real 403, is judged in
tests/integration/controller/test_watch_readiness.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients.errors import APIForbiddenError

from multinode.controller import watch_readiness


async def _readiness() -> tuple[aiotoggles.ToggleSet, aiotoggles.Toggle]:
    toggles = aiotoggles.ToggleSet(all)
    return toggles, await toggles.make_toggle(name="pods.v1@team-a")


def test_a_watch_cancelled_before_its_first_list_gives_back_its_own_and_its_workers_readiness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def never_listing(*, operator_indexed: Any, **_: Any) -> None:
        await operator_indexed.make_toggle(name="an object's worker")  # as for each object before the list ends
        await asyncio.Event().wait()

    monkeypatch.setattr(watch_readiness, "_kopf_watcher", never_listing)

    async def scenario() -> None:
        toggles, own = await _readiness()
        watch = asyncio.create_task(watch_readiness.watcher(operator_indexed=toggles, resource_indexed=own))
        await asyncio.sleep(0.05)
        assert not toggles.is_on() and len(list(toggles)) == 2
        watch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watch
        assert toggles.is_on() and not list(toggles)

    asyncio.run(scenario())


def test_a_first_list_that_never_ends_holds_nothing_back_past_the_deadline(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    async def hanging(**_: Any) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(watch_readiness, "_kopf_watcher", hanging)
    monkeypatch.setattr(watch_readiness, "READINESS_DEADLINE_SECONDS", 0.2)

    async def scenario() -> None:
        toggles, own = await _readiness()
        watch = asyncio.create_task(watch_readiness.watcher(operator_indexed=toggles, resource_indexed=own,
                                                            resource="pods.v1", namespace="team-a"))
        await asyncio.sleep(0.1)
        assert not toggles.is_on()
        await asyncio.wait_for(toggles.wait_for(True), timeout=5)
        assert not watch.done()  # the watch goes on; it only holds nothing back any more
        watch.cancel()

    with caplog.at_level(logging.WARNING, logger="multinode.controller"):
        asyncio.run(scenario())
    assert any("pods.v1 in team-a has held back" in r.getMessage() and "pods.v1@team-a" in r.getMessage()
               for r in caplog.records), caplog.text


def test_a_listed_watch_keeps_no_toggle_and_the_deadline_drops_nothing_of_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def listing(*, operator_indexed: Any, resource_indexed: Any, **_: Any) -> None:
        await operator_indexed.drop_toggle(resource_indexed)  # what kopf's watcher does once LISTED
        await asyncio.Event().wait()

    monkeypatch.setattr(watch_readiness, "_kopf_watcher", listing)
    monkeypatch.setattr(watch_readiness, "READINESS_DEADLINE_SECONDS", 0.1)

    async def scenario() -> None:
        toggles, own = await _readiness()
        elsewhere = await toggles.make_toggle(name="another watch, still listing")
        watch = asyncio.create_task(watch_readiness.watcher(operator_indexed=toggles, resource_indexed=own))
        await asyncio.sleep(0.3)
        assert list(toggles) == [elsewhere]
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        assert list(toggles) == [elsewhere]

    asyncio.run(scenario())


def test_a_failed_watch_is_started_again_holding_nothing_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    starts: list[Any] = []
    started_again = asyncio.Event()

    async def refused_once(*, resource_indexed: Any, **_: Any) -> None:
        starts.append(resource_indexed)
        if len(starts) == 1:
            raise APIForbiddenError({"message": "pods is forbidden"}, status=403, headers={})
        started_again.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(watch_readiness, "_kopf_watcher", refused_once)
    monkeypatch.setattr(watch_readiness, "RETRY_DELAYS_SECONDS", (0.01,))

    async def scenario() -> None:
        toggles, own = await _readiness()
        watch = asyncio.create_task(watch_readiness.watcher(operator_indexed=toggles, resource_indexed=own,
                                                            resource="pods.v1", namespace="team-a"))
        await asyncio.wait_for(started_again.wait(), timeout=5)
        assert starts == [own, None] and toggles.is_on()
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)

    with caplog.at_level(logging.WARNING, logger="multinode.controller"):
        asyncio.run(scenario())
    assert "pods.v1 in team-a failed (403 pods is forbidden)" in caplog.text
