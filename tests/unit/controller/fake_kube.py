"""A stand-in for KubeApi in the Reconciler's unit tests (its real calls are tested against the local cluster)."""

from __future__ import annotations

from collections.abc import Callable


class FakeKube:
    """Records the Reconciler's writes; a Pod's create goes through `create_pod`."""

    def __init__(self, create_pod: Callable[[str, dict], None]):
        self._create_pod = create_pod
        self.statuses: list[dict] = []

    async def create(self, namespace: str, body: dict) -> None:
        if body["kind"] == "Pod":
            self._create_pod(namespace, body)

    async def delete_pod(self, namespace: str, name: str, force: bool = False) -> None:
        pass

    async def delete_config_map(self, namespace: str, name: str) -> None:
        pass

    async def patch_job_status(self, namespace: str, name: str, status: dict) -> None:
        self.statuses.append(status)

    async def post_event(self, job_meta: dict, event_type: str, reason: str, message: str) -> None:
        pass

    async def delete_pod_group(self, namespace: str, name: str) -> None:
        pass
