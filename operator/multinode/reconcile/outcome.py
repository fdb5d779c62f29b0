"""What one reconcile pass decides: the Plan the controller applies, the Events it posts, and the Verdict
(phase and reason) the policies hand each other."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from multinode.api import Phase, TrainingJobStatus
from multinode.api.status import TERMINAL_PHASES
from multinode.reconcile.kinds import GroupPrune, ObjectRef, StatusWrite

__all__ = ["TERMINAL_PHASES", "Event", "GroupPrune", "ObjectRef", "Plan", "PodStream", "StatusWrite", "Verdict",
           "only_named", "pod_names"]  # TERMINAL_PHASES is api's, named here for the controller


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


class PodStream(Sequence[dict[str, Any]]):
    """The pods to create, each rendered when it is read and not kept: a 20 000-node gang's manifests never
    all sit in memory at once; the controller streams them to the apiserver a few at a time. `names` are
    known without rendering (the controller skips the pods it already created by name)."""

    __hash__ = None  # type: ignore[assignment]  # compares by content, like the list it stands for

    def __init__(self, keys: Sequence[int], name: Callable[[int], str], render: Callable[[int], dict[str, Any]]):
        self._keys, self._name, self._render = tuple(keys), name, render

    @property
    def names(self) -> list[str]:
        return [self._name(k) for k in self._keys]

    def only(self, names: set[str]) -> PodStream:
        """The pods among these whose name is in `names`."""
        return PodStream([k for k in self._keys if self._name(k) in names], self._name, self._render)

    def __len__(self) -> int:
        return len(self._keys)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self._render(k) for k in self._keys[i]]
        return self._render(self._keys[i])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self._render(k) for k in self._keys)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"PodStream({self.names!r})"


def pod_names(pods: Sequence[dict[str, Any]]) -> list[str]:
    """The names of the pods to create, without rendering a PodStream."""
    return pods.names if isinstance(pods, PodStream) else [p["metadata"]["name"] for p in pods]


def only_named(pods: Sequence[dict[str, Any]], names: set[str]) -> Sequence[dict[str, Any]]:
    return pods.only(names) if isinstance(pods, PodStream) else [p for p in pods if p["metadata"]["name"] in names]


@dataclass
class Plan:
    service: dict[str, Any] | None = None
    # Created in order, before the pods (the mirror's identity before the mirror).
    objects_to_create: list[dict[str, Any]] = field(default_factory=list)
    # A PodStream when planned (rendered as read); a plain list (or []) where a policy clears it.
    pods_to_create: Sequence[dict[str, Any]] = field(default_factory=list)
    # The attempt's shared env (a ConfigMap), created before pods_to_create, which read it; and the name of
    # the previous attempt's, deleted once the new one exists (its pods are gone or going).
    attempt_env: dict[str, Any] | None = None
    stale_attempt_env: str | None = None
    pods_to_delete: list[str] = field(default_factory=list)
    # Deleted without waiting for a kubelet (grace period 0): terminating pods on nodes that are not Ready.
    pods_to_force_delete: list[str] = field(default_factory=list)
    # The integrations' objects (reconcile/integration.py): to delete (an earlier attempt's PodGroup, a
    # Workload that no longer describes the job), to prune by the job's label (a gang scheduler's earlier
    # groups), and status writes (a Workload's Finished); spec.suspend to write (a queue started or stopped
    # the job).
    objects_to_delete: list[ObjectRef] = field(default_factory=list)
    objects_to_prune: list[GroupPrune] = field(default_factory=list)
    status_writes: list[StatusWrite] = field(default_factory=list)
    job_suspend: bool | None = None
    status: TrainingJobStatus = field(default_factory=TrainingJobStatus)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False
    # Pod name → annotations to merge into it (an in-place restart declares its attempt this way).
    pods_to_annotate: dict[str, dict[str, str]] = field(default_factory=dict)
    # Hot spares (reconcile/spares.py), created last: a refusal is logged and the next pass tries again, but
    # never holds up the gang's own actions nor fails the job (the gang runs without them).
    spares_to_create: list[dict[str, Any]] = field(default_factory=list)

    def delete(self, names: Iterable[str]) -> None:
        planned = set(self.pods_to_delete)  # a set: a 20 000-pod gang's deletions must not cost N² lookups
        for name in names:
            if name not in planned:
                planned.add(name)
                self.pods_to_delete.append(name)

    def come_back_in(self, seconds: float | None) -> None:
        if seconds is not None:
            self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


@dataclass(frozen=True)
class Verdict:
    """The job's phase for the current attempt, and the words that explain it."""

    phase: Phase
    reason: str
    message: str
