"""Reading rendered pod manifests: a container, and its env as the kubelet resolves it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import PREFLIGHT_CONTAINER, TRAINER_CONTAINER
from multinode.render import render_attempt_env, render_node_pod


def trainer(pod: dict[str, Any]) -> dict[str, Any]:
    """A rendered node pod's one container, the trainer."""
    (container,) = pod["spec"]["containers"]
    assert container["name"] == TRAINER_CONTAINER
    found: dict[str, Any] = container
    return found


def preflight(pod: dict[str, Any]) -> dict[str, Any]:
    """A rendered node pod's one init container, the preflight."""
    (container,) = pod["spec"]["initContainers"]
    assert container["name"] == PREFLIGHT_CONTAINER
    found: dict[str, Any] = container
    return found


def container_env(pod: dict[str, Any], container: str, config_maps: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A container's env as the kubelet builds it: the data of each envFrom ConfigMap (found among
    `config_maps` by name; a missing one is an error here, as it is for the kubelet), then `env`, a later
    entry of the same name replacing an earlier one."""
    spec = pod["spec"]
    c = next(c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == container)
    by_name = {cm["metadata"]["name"]: cm for cm in config_maps}
    resolved: dict[str, dict[str, Any]] = {}
    for source in c.get("envFrom", []):
        for key, value in by_name[source["configMapRef"]["name"]]["data"].items():
            resolved[key] = {"name": key, "value": value}
    for var in c.get("env", []):
        resolved.pop(var["name"], None)
        resolved[var["name"]] = var
    return list(resolved.values())


def trainer_container_env(pod: dict[str, Any], *config_maps: dict[str, Any]) -> list[dict[str, Any]]:
    """The trainer container's env, envFrom resolved against `config_maps`, in the kubelet's order."""
    return container_env(pod, TRAINER_CONTAINER, config_maps)


def node_env(job: TrainingJob, index: int, attempt: int, *, restarts: int = 0, resume_from: str = "",
             container: str = TRAINER_CONTAINER) -> list[dict[str, Any]]:
    """What a container of node `index` of `attempt` sees: its pod rendered with the attempt's ConfigMap."""
    pod = render_node_pod(job, index, attempt, resume_from=resume_from)
    return container_env(pod, container, [render_attempt_env(job, attempt, restarts=restarts)])


def preflight_env(job: TrainingJob, index: int, attempt: int) -> list[dict[str, Any]]:
    return node_env(job, index, attempt, container=PREFLIGHT_CONTAINER)
