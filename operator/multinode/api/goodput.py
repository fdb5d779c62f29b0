"""status.goodput: how much of a job's wall time trained, and where the rest went.

Whole seconds, cumulative over every attempt, written by the operator (reconcile/goodput.py keeps them);
docs/operations.md#goodput defines each cause.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field
from pydantic.config import JsonDict

from multinode.api.base import StatusModel

# Typed as pydantic wants it (a plain dict literal is dict[str, str] to mypy, which Field refuses).
_DATE_TIME: JsonDict = {"format": "date-time"}


class LostCause(StrEnum):
    """Why seconds were lost; the field names of LostSeconds and the `cause` label of the metric."""

    SCHEDULING = "scheduling"
    STARTUP = "startup"
    RESTART = "restart"
    REDONE = "redone"
    HANG = "hang"


class LostSeconds(StatusModel):
    """Seconds lost, by cause."""

    scheduling: int = Field(0, ge=0, description="An attempt's pods created → all bound to nodes.")
    startup: int = Field(0, ge=0, description="All bound → the attempt's first progress (all running when the "
                                              "job reports no progress): image pull, preflight, rendezvous.")
    restart: int = Field(0, ge=0, description="An attempt's failure → the next attempt's pods created: backoff "
                                              "and old pods terminating.")
    redone: int = Field(0, ge=0, description="At each restart, the work since the latest mirrored checkpoint (or "
                                             "the attempt's first progress), which the next attempt repeats.")
    hang: int = Field(0, ge=0, description="At each Hung restart, its last progress → the restart.")

    def get(self, cause: LostCause) -> int:
        return int(getattr(self, cause.value))


class GoodputStatus(StatusModel):
    """Productive and lost seconds of the job so far; the clock runs from the first pods' creation until the
    job finishes (training ended), and stops while suspended."""

    productive_seconds: int = Field(0, ge=0, description="Seconds the job trained and kept the result.")
    lost_seconds: int = Field(0, ge=0, description="Seconds lost, the sum of `lost`.")
    lost: LostSeconds = Field(default_factory=LostSeconds, description="Seconds lost, by cause.")
    percent: int | None = Field(None, ge=0, le=100, description="productiveSeconds out of productive + lost, "
                                                                "rounded down; for the printer column.")
    spare_seconds: int = Field(0, ge=0, description="Pod-seconds the job's hot spares (spec.spareNodes) waited: "
                                                    "machines held idle beyond numNodes. Not in lostSeconds or "
                                                    "percent, which are the gang's wall time.")
    reduced_seconds: int = Field(0, ge=0, description="Seconds an elastic job (spec.elastic) trained on fewer "
                                                      "than numNodes nodes: part of productiveSeconds, at a "
                                                      "reduced size.")
    attempt_productive_seconds: int = Field(0, ge=0, description="Productive seconds of the current attempt: what "
                                                                 "its restart turns into redone or hang.")
    accounted_until: str | None = Field(None, description="RFC3339 time up to which the seconds are counted; the "
                                                          "next reconcile counts from here, so none count twice.",
                                        json_schema_extra=_DATE_TIME)
