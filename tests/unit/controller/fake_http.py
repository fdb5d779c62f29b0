"""A fake of the connection pool KubeApi sends its requests through: canned answers, every request recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from multinode.controller.kube import KubeApi


@dataclass
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    data: bytes = b"{}"


class Pool:
    """Answers each request with the next of `answers`, recording what was sent."""

    def __init__(self, answers: list[Response]):
        self.answers = answers
        self.sent: list[tuple[str, str, bytes | None]] = []

    def request(self, method: str, url: str, body: bytes | None = None, **_: Any) -> Response:
        self.sent.append((method, url, body))
        return self.answers.pop(0)


def kube_with(pool: Pool) -> tuple[KubeApi, list[float], list[tuple[str, str]]]:
    """A KubeApi on `pool`; what it slept (after a 429), and the errors it counted."""
    configuration = SimpleNamespace(host="https://apiserver", auth_settings=dict)
    api_client = SimpleNamespace(configuration=configuration, rest_client=SimpleNamespace(pool_manager=pool))
    errors: list[tuple[str, str]] = []
    kube = KubeApi(api_client, 2, on_error=lambda op, code: errors.append((op, code)))  # type: ignore[arg-type]
    slept: list[float] = []
    kube._sleep = slept.append
    return kube, slept, errors
