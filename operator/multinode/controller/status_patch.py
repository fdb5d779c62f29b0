"""The status the operator writes: its JSON form and the merge patch that puts it on the server; and a
spec's validation error in the words a status condition carries."""

from __future__ import annotations

from pydantic import ValidationError

from multinode.api import TrainingJobStatus


def dump_status(status: TrainingJobStatus) -> dict:
    # status.checkpoints belongs to the mirror: the operator never writes it (nor compares it).
    return status.model_dump(by_alias=True, exclude_none=True, mode="json", exclude={"checkpoints"})


def status_patch(desired: dict, before: TrainingJobStatus | None, on_server: dict | None) -> dict:
    """A merge patch that makes the server's status `desired`: a field we cleared is sent as null,
    which removes it (leaving it out would leave the old value, e.g. a stale nextAttemptTime)."""
    patch = dict(desired)
    known = set(on_server or {}) | set(dump_status(before) if before is not None else {})
    for key in known - set(desired) - {"checkpoints"}:  # the mirror's field is never ours to clear
        patch[key] = None
    return patch


def describe_validation_error(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:5]:
        loc = err["loc"][1:] if err["loc"] and isinstance(err["loc"][0], int) else err["loc"]  # argument index
        path = ".".join(str(p) for p in loc)
        parts.append(f"{path}: {err['msg']}")
    return "; ".join(parts)
