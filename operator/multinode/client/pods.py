"""A job's pods as the user sees them: by rank and attempt, and which of them are worth a log stream.

Pure functions over the pods' JSON (as `kube.Kube.list_job_pods` returns them), tested with plain values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from multinode.api.constants import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_NODE_INDEX,
    LABEL_ATTEMPT,
    LABEL_NODE_INDEX,
    LABEL_SPARE,
    TRAINER_CONTAINER,
)

# A job's log fan-out without --max-streams: enough for every rank of a small job, and far below the
# connections a 1000-node job would open (one HTTP stream each, through the apiserver to each kubelet).
DEFAULT_MAX_STREAMS = 8


@dataclass(frozen=True)
class NodePod:
    """One node pod: its rank (node index), attempt, and the trainer container's state."""

    name: str
    rank: int
    attempt: int
    phase: str
    node: str | None = None
    # The trainer container: "waiting", "running" or "terminated" (None before it has a status).
    trainer_state: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    restarts: int = 0

    @property
    def started(self) -> bool:
        """Whether the trainer has run, so the kubelet has a log to give (a waiting container has none)."""
        return self.trainer_state in ("running", "terminated")

    @property
    def failing(self) -> bool:
        """Failed, exited non-zero, restarted, or stuck waiting with a reason (CrashLoopBackOff, ...)."""
        return (self.phase == "Failed" or (self.exit_code not in (None, 0)) or self.restarts > 0
                or (self.trainer_state == "waiting" and self.reason not in (None, "PodInitializing",
                                                                             "ContainerCreating")))


def _attempt(labels: dict[str, str], annotations: dict[str, str]) -> int:
    """The attempt the pod runs: the one it was made for (its label) or, restarted in place (restartStrategy
    InPlace), the one its annotation names."""
    told = annotations.get(ANNOTATION_ATTEMPT, "")
    return int(told) if told.isdigit() else int(labels.get(LABEL_ATTEMPT, 0))


def _rank(labels: dict[str, str], annotations: dict[str, str]) -> int | None:
    """The node index: a node pod's label, or the annotation of a hot spare that took a rank (None: a spare
    still waiting, or not a node pod)."""
    rank = annotations.get(ANNOTATION_NODE_INDEX, "") if LABEL_SPARE in labels else labels.get(LABEL_NODE_INDEX, "")
    return int(rank) if rank.isdigit() else None


def node_pod(pod: dict[str, Any]) -> NodePod | None:
    """The pod's rank and trainer state; None for a pod that is not a node pod (the mirror, a waiting spare)."""
    labels = pod.get("metadata", {}).get("labels") or {}
    rank = _rank(labels, pod.get("metadata", {}).get("annotations") or {})
    if rank is None:
        return None
    status = pod.get("status") or {}
    trainer = next((c for c in status.get("containerStatuses") or [] if c.get("name") == TRAINER_CONTAINER), None)
    state_name, exit_code, reason, restarts = None, None, status.get("reason"), 0
    if trainer:
        restarts = trainer.get("restartCount", 0)
        state = trainer.get("state") or {}
        state_name = next(iter(state), None)
        detail = state.get(state_name) or {} if state_name else {}
        exit_code = detail.get("exitCode")
        reason = detail.get("reason") or reason
    return NodePod(name=pod["metadata"]["name"], rank=rank,
                   attempt=_attempt(labels, pod["metadata"].get("annotations") or {}),
                   phase=status.get("phase") or "Pending",
                   node=(pod.get("spec") or {}).get("nodeName"), trainer_state=state_name, exit_code=exit_code,
                   reason=reason, restarts=restarts)


def node_pods(pods: Iterable[dict[str, Any]]) -> list[NodePod]:
    """Node pods ordered by attempt, then rank."""
    parsed = [p for p in (node_pod(pod) for pod in pods) if p is not None]
    return sorted(parsed, key=lambda p: (p.attempt, p.rank))


def by_attempt(pods: Iterable[NodePod]) -> dict[int, list[NodePod]]:
    grouped: dict[int, list[NodePod]] = {}
    for pod in sorted(pods, key=lambda p: (p.attempt, p.rank)):
        grouped.setdefault(pod.attempt, []).append(pod)
    return grouped


def select_for_logs(pods: Iterable[NodePod], *, ranks: Iterable[int] | None = None,
                    max_streams: int = DEFAULT_MAX_STREAMS) -> tuple[list[NodePod], int]:
    """Which pods get a log stream, and how many were left out.

    Ranks given: exactly those (every one asked for, `max_streams` does not cut a list the user wrote).
    Otherwise the leader (rank 0) first, then every failing pod, then every pod not running, then the rest
    in rank order, up to `max_streams` (0: no limit): a 1000-rank job shows the ranks worth reading
    without opening 1000 streams."""
    pods = list(pods)
    if ranks is not None:
        wanted = set(ranks)
        return [p for p in pods if p.rank in wanted], 0
    if max_streams <= 0:
        return sorted(pods, key=lambda p: (p.attempt, p.rank)), 0

    def priority(pod: NodePod) -> tuple[int, int, int]:
        if pod.rank == 0:
            group = 0
        elif pod.failing:
            group = 1
        elif pod.phase not in ("Running", "Succeeded"):
            group = 2
        else:
            group = 3
        return group, pod.attempt, pod.rank

    chosen = sorted(pods, key=priority)[:max_streams]
    return sorted(chosen, key=lambda p: (p.attempt, p.rank)), len(pods) - len(chosen)
