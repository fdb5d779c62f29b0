"""Times in the status: RFC 3339, UTC, whole seconds (multinode.timeformat.TIME_FORMAT)."""

from __future__ import annotations

from datetime import datetime

from multinode.timeformat import TIME_FORMAT


def rfc3339(now: datetime) -> str:
    return now.strftime(TIME_FORMAT)


def parse_time(value: str, like: datetime) -> datetime:
    """`value` as a datetime in the time zone of `like` (the status carries UTC)."""
    return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=like.tzinfo)
