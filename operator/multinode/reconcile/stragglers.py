"""Stragglers: a rank whose step time stays above stragglers.factor × the median of the other ranks' for
stragglers.forSeconds is reported (condition Stragglers, a Warning Event, multinode_trainingjob_straggler_ranks).

Which step time: what each rank reports in its heartbeat (`step_seconds`, its own compute before it waits
for the others), else the time between its heartbeats divided by the steps between them. In synchronous
data-parallel training every rank advances together, so only the reported time can single a straggler
out; trainers whose ranks advance independently show one in the measured time (a rank falling behind).
Logs without heartbeats carry no step time: no stragglers are judged then.

With action Exclude, `straggler_failure` then takes the slowest reported straggler whose node may go, keeps
that node out (exclusion.py, reason Straggler, for healthCheck.exclusionSeconds) and fails the attempt with
reason Straggler: by default a gang restart not counted against maxRestarts (a slow node is not the job's
fault; a failurePolicy rule `onReasons: [Straggler]` can count it or fail the job). One node per restart:
another slow node shows again in the next attempt. Two guards keep it from looping or stranding the job:
- a node stays in when the job would no longer fit on the nodes left: by capacity (allocatable GPUs over
  the GPUs a pod asks for, one pod per node for a CPU-only job; with spec.topology in one domain), without
  counting what other pods use, of the nodes that are Ready, schedulable, match the job's node selector
  and are not excluded already;
- a rank that was the straggler of the previous attempt's Straggler restart is a straggler again on
  another node: the slowness follows the rank (its data, its code), not the node; it is only reported.
Either way the Stragglers condition says which straggler stayed and why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.progress import MAX_RANKS_REPORTED, RankProgressStatus, StragglerAction
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.conditions import find_condition
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.exclusion import exclude_node, excluded_node_names, prune_expired
from multinode.reconcile.failures import Failure
from multinode.reconcile.outcome import Event
from multinode.reconcile.placement import ObservedNode, room_for
from multinode.reconcile.progress import JobProgress, RankProgress


# How a Straggler restart's message begins (status.restartHistory): the next attempt reads the rank back.
_EXCLUDED_RANK = re.compile(r"^rank (\d+) on node \S+: ")


def median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def slow_ranks(ranks: list[RankProgress], factor: float) -> list[tuple[RankProgress, float]]:
    """(rank, the other ranks' median step time) of every rank slower than factor × that median, slowest
    first. O(n log n): the median without one rank is read off the sorted list."""
    timed = sorted((r for r in ranks if r.step_seconds is not None), key=lambda r: r.step_seconds or 0.0)
    values = [r.step_seconds or 0.0 for r in timed]
    n = len(values)
    if n < 2:
        return []
    slow = []
    m = n - 1

    def other(j: int, k: int) -> float:  # position j of the sorted values without position k, no copy
        return values[j + 1] if j >= k else values[j]

    for k, rank in enumerate(timed):
        reference = other(m // 2, k) if m % 2 else (other(m // 2 - 1, k) + other(m // 2, k)) / 2
        if reference > 0 and values[k] > factor * reference:
            slow.append((rank, reference))
    return sorted(slow, key=lambda pair: -(pair[0].step_seconds or 0.0) / pair[1])


def judge_stragglers(job: TrainingJob, status: TrainingJobStatus, progress: JobProgress | None, running: set[int],
                     now: datetime) -> Decision:
    """status.progress's stragglers and median step time, the Stragglers condition, and an Event for ranks
    newly reported."""
    spec = job.spec.hang_detection
    report = status.progress
    if spec is None or report is None or progress is None or progress.attempt != status.attempt:
        return Decision()
    config = spec.stragglers
    ranks = [r for r in progress.ranks if r.index in running]
    times = [r.step_seconds for r in ranks if r.step_seconds is not None]
    slow = [] if config.action == StragglerAction.IGNORE else slow_ranks(ranks, config.factor)
    before = {s.index: s for s in report.stragglers}
    entries = []
    for rank, _reference in slow[:MAX_RANKS_REPORTED]:
        since = before[rank.index].since if rank.index in before else None
        last = rfc3339(rank.last_progress) if rank.last_progress else None
        entries.append(RankProgressStatus(index=rank.index, node=rank.node, step=rank.step,
                                          step_seconds=rank.step_seconds, since=since or rfc3339(now),
                                          last_progress_time=last))
    references = {rank.index: reference for rank, reference in slow}

    def slow_for(entry: RankProgressStatus) -> float:
        return (now - parse_time(entry.since or rfc3339(now), now)).total_seconds()

    for e in entries:  # built here: setting their flag changes nothing of the status read
        e.reported = slow_for(e) >= config.for_seconds
    confirmed = [e for e in entries if e.reported]
    waiting = [config.for_seconds - slow_for(e) for e in entries if not e.reported]
    was = {s.index for s in report.stragglers if s.reported}
    edits = {"progress": report.model_copy(update={
        "median_step_seconds": round(median(times), 6) if times else None, "stragglers": entries,
        "straggler_count": len(confirmed)})}
    requeue = min(waiting) if waiting else None
    if confirmed:
        message = "; ".join(
            f"rank {e.index}{f' on node {e.node}' if e.node else ''}: {e.step_seconds:.3g}s a step, the others' "
            f"median {references[e.index]:.3g}s (over {config.factor:g}×) for {slow_for(e):.0f}s" for e in confirmed)
        new = bool({e.index for e in confirmed} - was)
        return Decision(status=edits, requeue_after=requeue,
                        conditions=(SetCondition(ConditionType.STRAGGLERS, "True", Reason.STRAGGLERS_DETECTED,
                                                 message),),
                        events=(Event("Warning", Reason.STRAGGLERS_DETECTED, message),) if new else ())
    existing = find_condition(status.conditions, ConditionType.STRAGGLERS)
    cleared: tuple[SetCondition, ...] = ()
    if existing is not None and existing.status == "True":
        cleared = (SetCondition(ConditionType.STRAGGLERS, "False", Reason.NO_STRAGGLERS,
                                "no rank is slower than the others now"),)
    return Decision(status=edits, requeue_after=requeue, conditions=cleared)


def _why_kept(job: TrainingJob, status: TrainingJobStatus, entry: RankProgressStatus, nodes: Sequence[ObservedNode],
              excluded: set[str]) -> str | None:
    """Why a reported straggler's node must stay in; None when it may go."""
    last = status.restart_history[-1] if status.restart_history else None
    if last is not None and last.reason == Reason.STRAGGLER and last.attempt == status.attempt - 1:
        m = _EXCLUDED_RANK.match(last.message)
        if m is not None and int(m.group(1)) == entry.index:
            return "it was the straggler the last restart excluded a node for: the slowness follows the rank"
    room = room_for(job, nodes, excluded | {entry.node or ""})
    if room < job.spec.num_nodes:
        return (f"without {entry.node} the nodes left have room for {room} of the job's {job.spec.num_nodes} "
                "pods")
    return None


def straggler_failure(job: TrainingJob, status: TrainingJobStatus, nodes: Sequence[ObservedNode],
                      now: datetime) -> Decision:
    """With stragglers.action Exclude: exclude the node of the slowest reported straggler whose node may go
    and fail the attempt with reason Straggler; else no failure (and the Stragglers condition saying why)."""
    spec = job.spec.hang_detection
    report = status.progress
    if spec is None or spec.stragglers.action != StragglerAction.EXCLUDE or report is None:
        return Decision()
    # Expired entries go from the status whether or not a node is excluded now.
    pruned = prune_expired(status, now)
    excluded = set(excluded_node_names(status, now))
    kept = []
    for entry in (e for e in report.stragglers if e.reported and e.node):
        why = _why_kept(job, status, entry, nodes, excluded)
        if why is not None:
            kept.append(f"rank {entry.index} on node {entry.node} ({why})")
            continue
        median_seconds = f"{report.median_step_seconds:.3g}s" if report.median_step_seconds is not None else "?"
        took = f"{entry.step_seconds:.3g}s" if entry.step_seconds is not None else "?"
        message = (f"rank {entry.index} on node {entry.node}: {took} a step, the median {median_seconds}, for "
                   f"over {spec.stragglers.for_seconds}s; the node is excluded and the gang restarts without it")
        assert entry.node is not None
        added, excluded_nodes = exclude_node(status.excluded_nodes, entry.node, Reason.STRAGGLER, message, now=now,
                                             seconds=job.spec.health_check.exclusion_seconds)
        return Decision(failure=Failure(Reason.STRAGGLER, message, reasons=frozenset({Reason.STRAGGLER}),
                                        straggler=True, index=entry.index),
                        status={"excluded_nodes": excluded_nodes},
                        events=(Event("Warning", Reason.STRAGGLER, f"{message} (excluded until {added.until})"),))
    condition = find_condition(status.conditions, ConditionType.STRAGGLERS)
    if kept and condition is not None and condition.status == "True":
        return pruned.then(Decision(conditions=(SetCondition(
            ConditionType.STRAGGLERS, "True", Reason.STRAGGLERS_DETECTED,
            f"{condition.message}; not excluded: {'; '.join(kept)}"),)))
    return pruned
