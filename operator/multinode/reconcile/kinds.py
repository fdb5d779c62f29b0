"""Where a kind of object an integration owns lives, and the writes to such objects a Plan can hold (the
controller turns them into requests without knowing which integration asked)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ApiKind:
    """A custom kind: its API group and version, kind and plural (its collection's name)."""

    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def api(self) -> str:
        """The API's path: `/apis/<group>/<version>`."""
        return f"/apis/{self.group}/{self.version}"


@dataclass(frozen=True)
class ObjectRef:
    """One object of `kind` in the job's namespace, by name (to delete)."""

    kind: ApiKind
    name: str


@dataclass(frozen=True)
class StatusWrite:
    """A merge patch of an object's status, guarded by the resourceVersion read: its other writer (Kueue, for a
    Workload) may have written since, and a conflict is retried with the next observation."""

    kind: ApiKind
    name: str
    resource_version: str
    status: dict[str, Any]


@dataclass(frozen=True)
class GroupPrune:
    """Delete the objects of `kind` of job `job` from attempts before `attempt`. Kinds the operator does not
    watch (a gang scheduler's PodGroups, whose CRDs may come and go): the controller lists them by the job's
    label when it applies this (reconcile/stale_groups.py says which are stale)."""

    kind: ApiKind
    job: str
    attempt: int
