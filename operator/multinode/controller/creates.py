"""Creating a gang's pods as a stream: a bounded number of creates in flight, each pod rendered in its turn.

A plan's pods are a PodStream (reconcile/outcome.py), rendered when read; iterating it here, a few at a
time, means a 20 000-pod gang's manifests (and 20 000 waiting coroutines) are never all in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from multinode.controller.kube import KubeApi


async def create_stream(kube: KubeApi, namespace: str, pods: Sequence[dict], width: int
                        ) -> list[tuple[str, BaseException | None]]:
    """Create `pods` with at most `width` creates in flight: (name, error or None) per pod."""
    queue, outcomes = iter(pods), list[tuple[str, BaseException | None]]()

    async def stream() -> None:
        for pod in queue:  # one iterator shared by the streams: each pod is rendered once, by one of them
            name = pod["metadata"]["name"]
            try:
                await kube.create(namespace, pod)
                outcomes.append((name, None))
            except Exception as e:  # noqa: BLE001 - every outcome is judged by the caller
                outcomes.append((name, e))

    await asyncio.gather(*(stream() for _ in range(min(len(pods), width))))
    return outcomes
