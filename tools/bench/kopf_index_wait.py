"""kopf's start-up wait for its indices, in isolation: why an operator (re)start was O(objects²).

    .venv/bin/python -P tools/bench/kopf_index_wait.py 500 1000 2000 4000

kopf (1.45) gives every object of an indexed resource's initial LIST a toggle in one `ToggleSet` (the
watcher makes it on the object's first event); the object's worker indexes it, drops its toggle and
waits until every toggle is gone (`processing.process_resource_event`: `drop_toggle`, then
`operator_indexed.wait_for(True)`). Every drop is a `notify_all` on the set's one condition, which wakes
every worker already waiting: N objects arriving one by one cost N²/2 wake-ups. This replays exactly that
with kopf's own ToggleSet, no cluster, and counts the wake-ups (each a re-check of the set). Not run by
`make bench`: it measures kopf, which the operator no longer uses for pods and nodes (controller/informer.py).
"""

from __future__ import annotations

import asyncio
import sys
import time

from kopf._cogs.aiokits import aiotoggles


async def listed(n: int) -> tuple[int, float]:
    toggles = aiotoggles.ToggleSet(all)
    listing = await toggles.make_toggle(name="the LIST itself")
    checks = 0
    is_on = toggles.is_on

    def counted() -> bool:
        nonlocal checks
        checks += 1
        return is_on()

    toggles.is_on = counted  # type: ignore[method-assign]

    async def worker(toggle: aiotoggles.Toggle) -> None:
        await toggles.drop_toggle(toggle)
        await toggles.wait_for(True)

    started = time.perf_counter()
    workers = []
    for i in range(n):  # the LIST's objects arrive one by one: each gets a toggle and a worker
        toggle = await toggles.make_toggle(name=str(i))
        workers.append(asyncio.create_task(worker(toggle)))
        await asyncio.sleep(0)
    await toggles.drop_toggle(listing)  # the LIST is over
    await asyncio.gather(*workers)
    return checks, time.perf_counter() - started


def main() -> int:
    for n in map(int, sys.argv[1:] or ["500", "1000", "2000", "4000"]):
        wakeups, seconds = asyncio.run(listed(n))
        print(f"{n} objects listed: {wakeups} wake-ups, {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
