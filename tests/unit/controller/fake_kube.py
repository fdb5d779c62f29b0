"""A stand-in for KubeApi in the Reconciler's unit tests (its real calls are tested against the local cluster)."""

from __future__ import annotations

from typing import Any

from collections.abc import Callable

from multinode.controller.kube import ApiError


class FakeKube:
    """Records the Reconciler's writes; a Pod's create goes through `create_pod`. Objects in `existing`
    ((kind, name) → metadata) are there already: their create gets 409, and read_metadata returns theirs."""

    def __init__(self, create_pod: Callable[[str, dict], None] = lambda namespace, body: None,
                 existing: dict[tuple[str, str], dict] | None = None):
        self._create_pod = create_pod
        self.existing = existing if existing is not None else {}
        self.statuses: list[dict] = []
        self.made: list[tuple[str, str]] = []  # (kind, name) of every create that went through
        self.reads: list[tuple[str, str]] = []
        self.annotated: list[tuple[str, dict[str, str]]] = []

    async def create(self, namespace: str, body: dict) -> None:
        key = (body["kind"], body["metadata"]["name"])
        if key in self.existing:
            raise ApiError(f"create_{key[0]}", 409, "Conflict", f"{key[0]} {key[1]!r} already exists")
        if body["kind"] == "Pod":
            self._create_pod(namespace, body)
        self.made.append(key)

    async def read_metadata(self, namespace: str, body: dict) -> dict:
        key = (body["kind"], body["metadata"]["name"])
        self.reads.append(key)
        if key not in self.existing:
            raise ApiError(f"read_{key[0]}", 404, "NotFound", "not found")
        return self.existing[key]

    async def delete_pod(self, namespace: str, name: str, force: bool = False) -> None:
        pass

    async def delete_config_map(self, namespace: str, name: str) -> None:
        pass

    async def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.annotated.append((name, annotations))

    async def patch_job_status(self, namespace: str, name: str, status: dict) -> str | None:
        self.statuses.append(status)
        return str(len(self.statuses))  # the job's resourceVersion after the write

    async def post_event(self, job_meta: dict, event_type: str, reason: str, message: str) -> None:
        pass

    async def delete_object(self, namespace: str, kind: Any, name: str) -> None:
        pass
