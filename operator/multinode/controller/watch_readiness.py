"""Bounds how long one kopf watch may hold back every event of the operator.

kopf (1.45) processes no event at all until every watch that feeds an index has finished its first LIST,
and every object that watch listed has been indexed: that is what lets a restarted operator see all of
a job's pods before it acts (controller/handlers.py). Each watch holds a "readiness toggle" until then.
When that toggle is never given back, the whole operator goes quiet while its liveness stays OK:

- a watch that fails (403 in a namespace whose RoleBinding is not there yet, 404 while a CRD is replaced,
  5xx from a conversion webhook) or is cancelled (its namespace or CRD went away) before its first LIST
  is done never drops its toggle, and kopf does not start a failed watch again until its namespace or CRD
  changes; tests/integration/controller/test_watch_readiness.py froze every job of the operator this way;
- a first LIST, or the indexing of its objects, that does not complete: seen here once with no error
  logged (the Kueue test's operator processed no event for 34 s, kopf's shutdown naming the job's and the
  nodes' events as unprocessed); what hung was not found.

`install()` wraps kopf's per-resource watcher: every toggle a watch holds (its own, and those its object
workers hold) is given back when the watch ends or fails, and after READINESS_DEADLINE_SECONDS at the
latest, with a warning naming the watch; a failed watch is started again after a backoff. Past the
deadline the index may still lack objects of that watch; our pod names are deterministic, so a pod
created twice is refused by the apiserver, not duplicated.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients.errors import APIError
from kopf._cogs.clients.watching import WatchingError
from kopf._core.reactor import queueing

logger = logging.getLogger("multinode.controller")

# A first LIST takes milliseconds to a few seconds (a 10 000-pod namespace); a minute is not slow but stuck.
READINESS_DEADLINE_SECONDS = 30.0

# kopf does not start a failed watch again until its namespace or CRD changes (a 403 in a namespace whose
# RoleBinding comes a moment later, a 404 while a CRD is being replaced, a 5xx from a conversion webhook).
RETRY_DELAYS_SECONDS = (1, 2, 5, 10, 30)
RETRY_RESET_SECONDS = 60.0  # a watch that ran this long before failing starts its delays over

_kopf_watcher = queueing.watcher


class HeldReadiness:
    """The operator's readiness as one watch sees it: kopf's ToggleSet, remembering when each toggle this
    watch (and its object workers) made and has not dropped was made, so they can be given back."""

    def __init__(self, toggles: aiotoggles.ToggleSet, own: aiotoggles.Toggle):
        self._toggles = toggles
        self.held: dict[aiotoggles.Toggle, float] = {own: time.monotonic()}

    def is_on(self) -> bool:
        return self._toggles.is_on()

    async def wait_for(self, value: bool) -> None:
        await self._toggles.wait_for(value)

    async def make_toggle(self, value: bool = False, *, name: str | None = None) -> aiotoggles.Toggle:
        toggle = await self._toggles.make_toggle(value, name=name)
        self.held[toggle] = time.monotonic()
        return toggle

    async def drop_toggle(self, toggle: aiotoggles.Toggle) -> None:
        self.held.pop(toggle, None)
        await self._toggles.drop_toggle(toggle)

    async def release(self, made_before: float = float("inf")) -> list[str]:
        """Give back every toggle still held that was made before `made_before`; their names."""
        old = [toggle for toggle, made in self.held.items() if made < made_before]
        for toggle in old:
            del self.held[toggle]
        await self._toggles.drop_toggles(old)
        return sorted(toggle.name or "?" for toggle in old)


async def _release_when_overdue(held: HeldReadiness, what: str, deadline: float) -> None:
    while True:
        await asyncio.sleep(deadline / 2)
        names = await held.release(made_before=time.monotonic() - deadline)
        if names:
            logger.warning("%s has held back every event of the operator for %.0f s (its first list, or the "
                           "indexing of an object, has not finished); no longer: %s", what, deadline, ", ".join(names))


async def watcher(*, operator_indexed: aiotoggles.ToggleSet | None = None,
                  resource_indexed: aiotoggles.Toggle | None = None, **kwargs: Any) -> None:
    """kopf's watcher, giving back its readiness toggles when it ends or they are overdue, and started
    again after an API error."""
    what = f"the watch of {kwargs.get('resource')} in {kwargs.get('namespace') or 'the cluster'}"
    held = None if operator_indexed is None or resource_indexed is None else HeldReadiness(operator_indexed,
                                                                                           resource_indexed)
    overdue = None if held is None else asyncio.create_task(
        _release_when_overdue(held, what, READINESS_DEADLINE_SECONDS))
    failures = 0
    try:
        while True:
            started = time.monotonic()
            try:
                # HeldReadiness has every method kopf's watcher and its workers call on the ToggleSet.
                await _kopf_watcher(operator_indexed=held or operator_indexed,  # type: ignore[arg-type]
                                    resource_indexed=resource_indexed, **kwargs)
                return
            except (APIError, WatchingError) as e:
                # A watch that fails cannot finish its first list: it holds nothing back while it retries.
                if held is not None:
                    await held.release()
                resource_indexed = None
                failures = 1 if time.monotonic() - started > RETRY_RESET_SECONDS else failures + 1
                delay = RETRY_DELAYS_SECONDS[min(failures, len(RETRY_DELAYS_SECONDS)) - 1]
                said = f"{e.status} {e.message or e}" if isinstance(e, APIError) else str(e)
                logger.warning("%s failed (%s); watching again in %d s", what, said, delay)
                await asyncio.sleep(delay)
    finally:
        if overdue is not None:
            overdue.cancel()
        if held is not None:
            await asyncio.shield(held.release())


def install() -> None:
    """Make kopf's orchestration start watches through `watcher` (it looks the function up at each start)."""
    queueing.watcher = watcher
