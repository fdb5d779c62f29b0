"""Training progress as the planner sees it: per rank, the last step and when it advanced.

A minimal stand-in for the progress and hang detection built on another branch (the same names and
fields, no prober): goodput accounting (goodput.py) codes against it. At merge, that branch's module wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class RankProgress:
    index: int
    node: str | None
    step: int | None
    last_progress: datetime | None
    step_seconds: float | None = None
    samples_per_second: float | None = None


@dataclass(frozen=True)
class JobProgress:
    attempt: int
    ranks: tuple[RankProgress, ...]
    first_progress: datetime | None
