"""What one reconcile pass decides: the Plan the controller applies, the Events it posts, and the Verdict
(phase and reason) the policies hand each other."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from multinode.api import Phase, TrainingJobStatus

TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class GroupPrune:
    """Delete the gang scheduler's PodGroups (`api_version`) of job `job` from attempts before `attempt`. The
    operator does not watch those kinds (their CRDs may come and go), so the controller lists them by the
    job's label when it applies this."""

    api_version: str
    job: str
    attempt: int


@dataclass
class Plan:
    service: dict[str, Any] | None = None
    # Created in order, before the pods (the mirror's identity before the mirror).
    objects_to_create: list[dict[str, Any]] = field(default_factory=list)
    pods_to_create: list[dict[str, Any]] = field(default_factory=list)
    pods_to_delete: list[str] = field(default_factory=list)
    # Deleted without waiting for a kubelet (grace period 0): terminating pods on nodes that are not Ready.
    pods_to_force_delete: list[str] = field(default_factory=list)
    # Native PodGroups of earlier attempts (reconcile/gang.py).
    pod_groups_to_delete: list[str] = field(default_factory=list)
    # A gang scheduler's PodGroups (Volcano, coscheduling) of earlier attempts, when the next one's is made.
    gang_groups_to_prune: GroupPrune | None = None
    status: TrainingJobStatus = field(default_factory=TrainingJobStatus)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False

    def delete(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self.pods_to_delete:
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
