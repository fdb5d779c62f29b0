"""Stragglers: a rank whose step time stays above stragglers.factor × the median of the other ranks' for
stragglers.forSeconds is reported (condition Stragglers, a Warning Event, multinode_trainingjob_straggler_ranks).

Which step time: what each rank reports in its heartbeat (`step_seconds`, its own compute before it waits
for the others), else the time between its heartbeats divided by the steps between them. In synchronous
data-parallel training every rank advances together, so only the reported time can single a straggler
out; trainers whose ranks advance independently show one in the measured time (a rank falling behind).
Logs without heartbeats carry no step time: no stragglers are judged then.

The action is Report only. Restarting without the slow node is the node-exclusion policy's to do (it
reads status.progress.stragglers: the ranks and their nodes).
"""

from __future__ import annotations

from datetime import datetime

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.progress import MAX_RANKS_REPORTED, RankProgressStatus, StragglerAction
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.conditions import find_condition, set_condition
from multinode.reconcile.outcome import Event, Plan
from multinode.reconcile.progress import JobProgress, RankProgress


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
                     result: Plan, now: datetime) -> None:
    spec = job.spec.hang_detection
    report = status.progress
    if spec is None or report is None or progress is None or progress.attempt != status.attempt:
        return
    config = spec.stragglers
    ranks = [r for r in progress.ranks if r.index in running]
    times = [r.step_seconds for r in ranks if r.step_seconds is not None]
    report.median_step_seconds = round(median(times), 6) if times else None
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

    for e in entries:
        e.reported = slow_for(e) >= config.for_seconds
    confirmed = [e for e in entries if e.reported]
    waiting = [config.for_seconds - slow_for(e) for e in entries if not e.reported]
    if waiting:
        result.come_back_in(min(waiting))
    was = {s.index for s in report.stragglers if s.reported}
    report.stragglers, report.straggler_count = entries, len(confirmed)
    gen, at = job.metadata.generation, rfc3339(now)
    if confirmed:
        message = "; ".join(
            f"rank {e.index}{f' on node {e.node}' if e.node else ''}: {e.step_seconds:.3g}s a step, the others' "
            f"median {references[e.index]:.3g}s (over {config.factor:g}×) for {slow_for(e):.0f}s" for e in confirmed)
        set_condition(status.conditions, ConditionType.STRAGGLERS, "True", Reason.STRAGGLERS_DETECTED, message,
                      now=at, generation=gen)
        if {e.index for e in confirmed} - was:
            result.events.append(Event("Warning", Reason.STRAGGLERS_DETECTED, message))
        return
    existing = find_condition(status.conditions, ConditionType.STRAGGLERS)
    if existing is not None and existing.status == "True":
        set_condition(status.conditions, ConditionType.STRAGGLERS, "False", Reason.NO_STRAGGLERS,
                      "no rank is slower than the others now", now=at, generation=gen)
