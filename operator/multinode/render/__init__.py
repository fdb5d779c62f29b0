"""Pure functions from a TrainingJob to the manifests (plain dicts) the operator applies.

Imports only multinode.api; never talks to Kubernetes.
"""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob
from multinode.render.env import operator_env, render_node_env
from multinode.render.names import (
    node_dns_name,
    node_hostname,
    owner_reference,
    pod_name,
    service_name,
)
from multinode.render.pod import PREFLIGHT_CONTAINER, TRAINER_CONTAINER, render_node_pod
from multinode.render.service import render_headless_service
from multinode.render.settings import DEFAULT_OPERATOR_IMAGE, RenderSettings


def render_all(
    job: TrainingJob, attempt: int, settings: RenderSettings | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The headless Service and every node pod of one gang attempt, in index order."""
    pods = [
        render_node_pod(job, index, attempt, settings) for index in range(job.spec.num_nodes)
    ]
    return render_headless_service(job), pods


__all__ = [
    "DEFAULT_OPERATOR_IMAGE",
    "PREFLIGHT_CONTAINER",
    "TRAINER_CONTAINER",
    "RenderSettings",
    "node_dns_name",
    "node_hostname",
    "operator_env",
    "owner_reference",
    "pod_name",
    "render_all",
    "render_headless_service",
    "render_node_env",
    "render_node_pod",
    "service_name",
]
