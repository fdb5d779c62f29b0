"""Hang detection and stragglers: the spec fields that turn them on, and the progress the operator reports.

The operator reads progress from the trainer containers' logs (docs/user-guide.md, "Hang detection"): any
new line, or, once a trainer prints heartbeats (multinode.progress), only heartbeats. `status.progress` is
the operator's summary of the current attempt; the lists in it are bounded, so a 1000-node job writes a
handful of entries, not a thousand.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field
from pydantic.config import JsonDict

from multinode.api.base import ApiModel, StatusModel

_DATE_TIME: JsonDict = {"format": "date-time"}
# status.progress lists at most this many ranks each (the first to stall, the slowest).
MAX_RANKS_REPORTED = 10
# One week: beyond that a "hang" is a job nobody watches.
MAX_HANG_TIMEOUT_SECONDS = 7 * 24 * 3600
# Below this, a poll of the logs (a fifth of the timeout, at least 2 s) could not tell silence from latency.
MIN_HANG_TIMEOUT_SECONDS = 10


class ProgressSource(StrEnum):
    HEARTBEAT = "Heartbeat"  # heartbeat lines with a step (multinode.progress)
    LOGS = "Logs"  # any new line of the trainer's log (no change to the trainer)


class StragglerAction(StrEnum):
    REPORT = "Report"  # a condition, an Event and multinode_trainingjob_straggler_ranks
    IGNORE = "Ignore"  # not looked for
    # Report, then keep a reported straggler's node out (status.excludedNodes, reason Straggler) and restart
    # the gang without it, uncounted; only while the job still fits on the nodes left (reconcile/stragglers.py).
    EXCLUDE = "Exclude"


class StragglerDetection(ApiModel):
    """A rank whose step time stays above `factor` × the median of the other ranks' for `forSeconds`."""

    # gt, not ge=1.1: the apiserver compares an integer value with an integer-truncated minimum (1 >= int(1.1)),
    # so `factor: 1` would pass admission and fail in the operator; an exclusive bound of 1 holds for both.
    # (Kubernetes' schema spells an exclusive bound as minimum plus exclusiveMinimum: true.)
    factor: float = Field(2.0, gt=1.0, le=100.0, description="How many times the other ranks' median step "
                                                              "time a rank must take to be a straggler (over 1).",
                          json_schema_extra={"minimum": 1.0, "exclusiveMinimum": True})
    for_seconds: int = Field(300, ge=0, le=86400, description="How long a rank must stay that slow before "
                                                               "it is reported.")
    action: StragglerAction = Field(
        StragglerAction.REPORT,
        description="Report (condition Stragglers, an Event, a metric), Ignore, or Exclude: report, then keep a "
                    "reported straggler's node out of the job for healthCheck.exclusionSeconds (status.excludedNodes, "
                    "reason Straggler) and restart the gang without it, not counted against maxRestarts; never when "
                    "the job would no longer fit on the nodes left, nor twice in a row for the same rank.")


class HangDetection(ApiModel):
    """Restart the gang when no rank makes progress for `timeoutSeconds`."""

    timeout_seconds: int = Field(
        ge=MIN_HANG_TIMEOUT_SECONDS, le=MAX_HANG_TIMEOUT_SECONDS,
        description="No rank progressed (a new log line, or once heartbeats are seen a higher heartbeat step) "
                    "for this long, counted from the moment every pod runs: the attempt fails with reason Hung "
                    "and the failure policy decides (by default a counted restart).")
    stragglers: StragglerDetection = Field(default_factory=StragglerDetection,
                                           description="Stragglers, from the step times ranks report.",
                                           json_schema_extra={"default": {}})


class RankProgressStatus(StatusModel):
    """One rank (node index) the operator names: stalled, or a straggler."""

    index: int = Field(ge=0, description="Node index (NODE_RANK).")
    node: str | None = Field(None, max_length=253, description="Kubernetes node the rank's pod runs on.")
    step: int | None = Field(None, ge=0, description="Its last heartbeat step.")
    last_progress_time: str | None = Field(None, description="RFC3339 time of its last progress.",
                                           json_schema_extra=_DATE_TIME)
    step_seconds: float | None = Field(None, ge=0, description="Its step time (reported, else measured "
                                                               "between heartbeats).")
    since: str | None = Field(None, description="Straggler: RFC3339 time it was first seen that slow.",
                              json_schema_extra=_DATE_TIME)
    reported: bool | None = Field(None, description="Straggler: slow for stragglers.forSeconds, so reported.")


class ProgressStatus(StatusModel):
    """Progress of the current attempt, as read from the trainers' logs (only with spec.hangDetection)."""

    attempt: int = Field(0, ge=0, description="The attempt this describes.")
    step: int | None = Field(None, ge=0, description="Lowest heartbeat step over the running ranks: the step "
                                                     "every rank has reached.")
    last_progress_time: str | None = Field(None, description="RFC3339 time any rank last progressed.",
                                           json_schema_extra=_DATE_TIME)
    first_progress_time: str | None = Field(None, description="RFC3339 time of this attempt's first progress "
                                                              "(first heartbeat, or first log line).",
                                            json_schema_extra=_DATE_TIME)
    source: ProgressSource | None = Field(None, description="Heartbeat or Logs: what counts as progress.")
    median_step_seconds: float | None = Field(None, ge=0, description="Median step time over the ranks.")
    stalled_ranks: list[RankProgressStatus] = Field(
        default_factory=list, max_length=MAX_RANKS_REPORTED,
        description=f"When the attempt hung: its ranks, the first to stall first (at most {MAX_RANKS_REPORTED}). "
                    "The next attempt starts a new record; status.restartHistory keeps the message.")
    stalled_count: int = Field(0, ge=0, description="How many ranks had stalled (the list is bounded).")
    stragglers: list[RankProgressStatus] = Field(
        default_factory=list, max_length=MAX_RANKS_REPORTED,
        description=f"Ranks slower than stragglers.factor × the others' median, slowest first (at most "
                    f"{MAX_RANKS_REPORTED}); those slow for stragglers.forSeconds are reported.")
    straggler_count: int = Field(0, ge=0, description="Ranks reported as stragglers now.")
