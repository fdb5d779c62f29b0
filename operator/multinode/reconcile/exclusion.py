"""Node exclusion: nodes a job's next attempts stay off, for a while (status.excludedNodes).

A node lands here when its health check fails (spec.healthCheck) or it hosts a straggler (stragglers.action
Exclude, stragglers.py); `exclude_node` is the one way in. New attempts' pods get a required node affinity
NotIn the excluded nodes (render/node_exclusion.py). Entries expire after spec.healthCheck.exclusionSeconds,
whatever excluded the node: a node is repaired or replaced, and a job that excluded every node of a small
pool must get it back. The list is bounded (MAX_EXCLUDED_NODES, the oldest entry goes first).
Pods already created keep their affinity: an exclusion that expires while an attempt's pods are Pending
takes effect with the next attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.health_check import MAX_EXCLUDED_NODES, MAX_HEALTH_MESSAGE, ExcludedNode
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.decision import Decision
from multinode.reconcile.outcome import Event


def unexpired(excluded: Sequence[ExcludedNode], now: datetime) -> list[ExcludedNode]:
    """The entries whose time is not up."""
    return [e for e in excluded if parse_time(e.until, now) > now]


def prune_expired(status: TrainingJobStatus, now: datetime) -> Decision:
    """status.excludedNodes without the entries whose time is up."""
    return Decision(status={"excluded_nodes": unexpired(status.excluded_nodes, now)})


def excluded_node_names(status: TrainingJobStatus, now: datetime) -> list[str]:
    """The nodes a pod created now must stay off (expired entries left out)."""
    return [e.node for e in unexpired(status.excluded_nodes, now)]


def exclude_node(excluded: Sequence[ExcludedNode], node: str, reason: str, message: str, *, now: datetime,
                 seconds: int) -> tuple[ExcludedNode, list[ExcludedNode]]:
    """`node`'s entry, kept out of the job's attempts for `seconds` from `now`, and the list `excluded` (expired
    entries pruned) with it.

    Excluding a node already excluded renews its entry (the later end wins) and moves it to the end, so
    the bound drops the entry that was renewed longest ago.
    """
    kept = unexpired(excluded, now)
    until = now + timedelta(seconds=seconds)
    old = next((e for e in kept if e.node == node), None)
    if old is not None:
        until = max(until, parse_time(old.until, now))
    entry = ExcludedNode(node=node, reason=reason[:128], message=message[:MAX_HEALTH_MESSAGE], until=rfc3339(until))
    return entry, [*(e for e in kept if e.node != node), entry][-MAX_EXCLUDED_NODES:]


def exclude_unhealthy_nodes(job: TrainingJob, status: TrainingJobStatus, pods: Iterable[ObservedPod],
                            now: datetime) -> Decision:
    """Exclude the node of every pod whose health check failed; one Warning Event per node."""
    excluded = list(status.excluded_nodes)
    entries: list[ExcludedNode] = []
    events = []
    for pod in sorted(pods, key=lambda p: p.index):
        if not pod.unhealthy or pod.node is None or pod.health is None:
            continue
        if any(e.node == pod.node for e in entries):  # two of the gang's pods on one bad node
            continue
        entry, excluded = exclude_node(excluded, pod.node, pod.health.reason, pod.health.message or "", now=now,
                                       seconds=job.spec.health_check.exclusion_seconds)
        entries.append(entry)
        events.append(Event("Warning", Reason.NODE_UNHEALTHY,
                            f"node {pod.node} failed the health check of pod {pod.name} "
                            f"({entry.reason}: {entry.message}); excluded until {entry.until}"))
    if not entries:
        return Decision()
    return Decision(status={"excluded_nodes": excluded}, events=tuple(events))
