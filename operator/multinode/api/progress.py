"""status.progress: how far training got, as the progress source reports it.

A minimal stand-in for the model built on another branch with progress and hang detection (same fields
and aliases); goodput accounting reads it. At merge, that branch's model wins.
"""

from __future__ import annotations

from pydantic import Field
from pydantic.config import JsonDict

from multinode.api.base import ApiModel

# Typed as pydantic wants it (a plain dict literal is dict[str, str] to mypy, which Field refuses).
_DATE_TIME: JsonDict = {"format": "date-time"}


class ProgressStatus(ApiModel):
    """The training step and when it last advanced, for the current attempt."""

    step: int | None = Field(None, ge=0, description="Latest training step any rank reported.")
    last_progress_time: str | None = Field(None, description="RFC3339 time the step last advanced.",
                                           json_schema_extra=_DATE_TIME)
    first_progress_time: str | None = Field(None, description="RFC3339 time of the current attempt's first "
                                                              "progress.", json_schema_extra=_DATE_TIME)
    source: str | None = Field(None, max_length=64, description="Where progress is read from: Heartbeat or Logs.")
