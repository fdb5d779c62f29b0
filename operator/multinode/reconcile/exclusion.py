"""Node exclusion: nodes a job's next attempts stay off, for a while (status.excludedNodes).

A node lands here when its health check fails (spec.healthCheck) or it hosts a straggler (stragglers.action
Exclude, stragglers.py); `exclude_node` is the one way in. New attempts' pods get a required node affinity
NotIn the excluded nodes (render/health_check_pod.py). Entries expire after spec.healthCheck.exclusionSeconds,
whatever excluded the node: a node is repaired or replaced, and a job that excluded every node of a small
pool must get it back. The list is bounded (MAX_EXCLUDED_NODES, the oldest entry goes first).
Pods already created keep their affinity: an exclusion that expires while an attempt's pods are Pending
takes effect with the next attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.health_check import MAX_EXCLUDED_NODES, MAX_HEALTH_MESSAGE, ExcludedNode
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import Event, Plan


def prune_expired(status: TrainingJobStatus, now: datetime) -> None:
    """Drop the entries whose time is up."""
    status.excluded_nodes = [e for e in status.excluded_nodes if parse_time(e.until, now) > now]


def excluded_node_names(status: TrainingJobStatus, now: datetime) -> list[str]:
    """The nodes a pod created now must stay off (expired entries pruned first)."""
    prune_expired(status, now)
    return [e.node for e in status.excluded_nodes]


def exclude_node(status: TrainingJobStatus, node: str, reason: str, message: str, *, now: datetime,
                 seconds: int) -> ExcludedNode:
    """Keep `node` out of the job's attempts for `seconds` from `now`; returns its entry.

    Excluding a node already excluded renews its entry (the later end wins) and moves it to the end, so
    the bound drops the entry that was renewed longest ago.
    """
    prune_expired(status, now)
    until = now + timedelta(seconds=seconds)
    old = next((e for e in status.excluded_nodes if e.node == node), None)
    if old is not None:
        until = max(until, parse_time(old.until, now))
    entry = ExcludedNode(node=node, reason=reason[:128], message=message[:MAX_HEALTH_MESSAGE], until=rfc3339(until))
    kept = [e for e in status.excluded_nodes if e.node != node]
    status.excluded_nodes = [*kept, entry][-MAX_EXCLUDED_NODES:]
    return entry


def exclude_unhealthy_nodes(job: TrainingJob, status: TrainingJobStatus, pods: Iterable[ObservedPod],
                            result: Plan, now: datetime) -> list[ExcludedNode]:
    """Exclude the node of every pod whose health check failed; one Warning Event per node."""
    entries: list[ExcludedNode] = []
    for pod in sorted(pods, key=lambda p: p.index):
        if not pod.unhealthy or pod.node is None or pod.health is None:
            continue
        if any(e.node == pod.node for e in entries):  # two of the gang's pods on one bad node
            continue
        entry = exclude_node(status, pod.node, pod.health.reason, pod.health.message or "", now=now,
                             seconds=job.spec.health_check.exclusion_seconds)
        entries.append(entry)
        result.events.append(Event("Warning", Reason.NODE_UNHEALTHY,
                                   f"node {pod.node} failed the health check of pod {pod.name} "
                                   f"({entry.reason}: {entry.message}); excluded until {entry.until}"))
    return entries
