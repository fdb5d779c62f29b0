"""Pure functions from a TrainingJob to the manifests (plain dicts) the operator applies.

Imports only multinode.api; never talks to Kubernetes.
"""

from __future__ import annotations

from multinode.api.constants import PREFLIGHT_CONTAINER, TRAINER_CONTAINER, node_hostname
from multinode.render.attempt_env import attempt_env_name, render_attempt_env
from multinode.render.env import attempt_env, node_env, operator_env
from multinode.render.names import (
    node_dns_name,
    owner_reference,
    pod_name,
    service_name,
)
from multinode.render.pod import render_node_pod
from multinode.render.attempt_group import pod_group_name
from multinode.render.service import render_headless_service
from multinode.render.settings import DEFAULT_MIRROR_CLUSTER_ROLE, DEFAULT_OPERATOR_IMAGE, RenderSettings


__all__ = [
    "DEFAULT_MIRROR_CLUSTER_ROLE",
    "DEFAULT_OPERATOR_IMAGE",
    "PREFLIGHT_CONTAINER",
    "TRAINER_CONTAINER",
    "RenderSettings",
    "attempt_env",
    "attempt_env_name",
    "node_dns_name",
    "node_env",
    "node_hostname",
    "operator_env",
    "owner_reference",
    "pod_group_name",
    "pod_name",
    "render_attempt_env",
    "render_headless_service",
    "render_node_pod",
    "service_name",
]
