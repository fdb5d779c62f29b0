"""Reading rendered pod manifests in tests."""

from __future__ import annotations

from typing import Any

from multinode.api.constants import TRAINER_CONTAINER


def trainer_container_env(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The trainer container's env, in order, as render_node_pod (the operator's only renderer of it) wrote it."""
    return next(c for c in pod["spec"]["containers"] if c["name"] == TRAINER_CONTAINER)["env"]
