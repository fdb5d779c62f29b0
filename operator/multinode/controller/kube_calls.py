"""What the operator's requests to Kubernetes share: the error every failed call raises, where each kind
lives, request paths, and the one call the request mixins (kube_core.py, kube_custom.py) build on, which
KubeApi (kube.py) makes over the official client's connection pool."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import re

from multinode.api import GROUP, PLURAL, VERSION

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
# Deletes leave dependents to the garbage collector, in the background.
BACKGROUND = {"propagationPolicy": "Background"}
HTTP_NOT_FOUND = 404


class ApiError(Exception):
    """A call to the apiserver failed: the only error that leaves KubeApi (the client's own types stay
    inside kube.py). `status` is the HTTP status, or None when no answer came (a timeout, a broken connection:
    `reason` names it); `message` is the apiserver's own message, which names the offending field. What a
    status means for a job is decided in reconcile (reconcile/refusals.py), not here."""

    def __init__(self, operation: str, status: int | None, reason: str, message: str):
        super().__init__(f"{operation}: {status or reason}: {message}")
        self.operation, self.status, self.reason, self.message = operation, status, reason, message
        # For a refused create: the apiVersion of the object refused (a 404 on a gang scheduler's PodGroup
        # means its CRD is not installed).
        self.api_version: str | None = None

    @property
    def code(self) -> str:
        """The `code` label of multinode_api_errors_total: the HTTP status, or the transport error's name."""
        return str(self.status) if self.status is not None else self.reason


# Where each kind the operator creates lives: (API prefix, collection) under /namespaces/<ns>/, and the
# official client's method name, kept as the `operation` label of multinode_api_errors_total.
COLLECTIONS = {
    "Pod": ("/api/v1", "pods", "create_namespaced_pod"),
    "Service": ("/api/v1", "services", "create_namespaced_service"),
    "ConfigMap": ("/api/v1", "configmaps", "create_namespaced_config_map"),
    "ServiceAccount": ("/api/v1", "serviceaccounts", "create_namespaced_service_account"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", "create_namespaced_role_binding"),
    "Event": ("/api/v1", "events", "create_namespaced_event"),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", "create_namespaced_pod_disruption_budget"),
}


def operation_name(verb: str, kind: str, suffix: str = "") -> str:
    """The official client's name for a namespaced call on `kind`: ("delete", "PodGroup") →
    delete_namespaced_pod_group."""
    return f"{verb}_namespaced_{re.sub(r'(?<!^)(?=[A-Z])', '_', kind).lower()}{suffix}"


def collection_of(body: dict) -> tuple[str, str, str]:
    """Where `body` is created: a built-in kind where COLLECTIONS says, an integration's custom kind (a
    PodGroup of any gang scheduler, a Workload) under its apiVersion, in the plural Kubernetes gives a CRD
    by default (the lowercase kind and an s), which every kind the integrations create uses."""
    if body["kind"] in COLLECTIONS:
        return COLLECTIONS[body["kind"]]
    kind = body["kind"]
    return f"/apis/{body.get('apiVersion', '')}", f"{kind.lower()}s", operation_name("create", kind)


class KubeCalls:
    """The base of the request mixins: `_call` sends one request and returns the response's body, or raises
    ApiError (KubeApi implements it)."""

    async def _call(self, operation: str, method: str, path: str, body: Any, content_type: str = JSON,
                    accept: str = JSON) -> bytes:
        raise NotImplementedError

    async def _call_unless_gone(self, operation: str, method: str, path: str, body: Any,
                                content_type: str = JSON) -> bytes | None:
        """A write to an object that may be gone already (a 404): deleting it, or writing to a job that was
        deleted; nothing is left to do then (None). Else the response's body."""
        try:
            return await self._call(operation, method, path, body, content_type)
        except ApiError as e:
            if e.status != HTTP_NOT_FOUND:
                raise
            return None


def path_segment(name: str) -> str:
    """`name` as one segment of a request path. The names come from a job's spec (its podTemplate's
    priorityClassName): quoted, so a '/' or '?' cannot reach another path or add a query, and '.' and '..'
    refused, which the HTTP client would resolve to the parent path. The CRD admits only DNS names there;
    this holds for objects stored before it did."""
    if name in (".", ".."):
        raise ValueError(f"{name!r} is not an object name")
    return quote(name, safe="")


def job_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def lease_path(namespace: str, name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases" + (f"/{name}" if name else "")
