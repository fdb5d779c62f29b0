"""Operator-wide settings, from the command line or MULTINODE_* environment variables (the chart sets those)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from multinode.api.constants import DEFAULT_PREFLIGHT_TIMEOUT_SECONDS
from multinode.render import DEFAULT_OPERATOR_IMAGE, RenderSettings


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


@dataclass(frozen=True)
class OperatorSettings:
    # Empty: watch every namespace.
    namespaces: tuple[str, ...] = ()
    # What shapes the rendered pods (the operator image, the preflight timeout) is the renderer's own
    # settings class, held here, not mirrored field by field.
    render: RenderSettings = field(default_factory=RenderSettings)
    # Jobs reconciled at once, and API calls in flight at once (pod creation fans out to this many).
    workers: int = 8
    api_concurrency: int = 32
    # A failing reconcile is retried with exponential backoff up to this many seconds.
    max_retry_delay_seconds: float = 60.0
    # Each API call of the operator's client gives up after this long (the reconcile is then retried):
    # without a timeout, one call to a hung apiserver or over a dead connection stalls its job forever.
    api_timeout_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.workers < 1 or self.api_concurrency < 1:
            raise ValueError("workers and api_concurrency must be at least 1")
        if self.api_timeout_seconds <= 0:
            raise ValueError("api_timeout_seconds must be positive")

    @classmethod
    def from_env(cls, *, operator_image: str | None = None, **overrides: Any) -> OperatorSettings:
        """The chart's MULTINODE_* variables; keyword arguments that are not None (the command line) win."""
        render = RenderSettings(
            operator_image=operator_image or os.environ.get("MULTINODE_OPERATOR_IMAGE", DEFAULT_OPERATOR_IMAGE),
            preflight_timeout_seconds=_env_int("MULTINODE_PREFLIGHT_TIMEOUT_SECONDS",
                                               DEFAULT_PREFLIGHT_TIMEOUT_SECONDS))
        namespaces = tuple(n for n in os.environ.get("MULTINODE_NAMESPACES", "").split(",") if n)
        values: dict[str, Any] = {
            "namespaces": namespaces,
            "render": render,
            "workers": _env_int("MULTINODE_WORKERS", 8),
            "api_concurrency": _env_int("MULTINODE_API_CONCURRENCY", 32),
            "api_timeout_seconds": float(os.environ.get("MULTINODE_API_TIMEOUT_SECONDS") or 30),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
