"""The operator's writes to Kubernetes: plain JSON over the official client's connection pool, in threads.

The official client is used for what it does well (kubeconfig and in-cluster credentials, token refresh,
TLS, the connection pool) but not for the request itself: its typed path validates every body against
its pydantic models and serialises it again, and its `_preload_content=False` mode hands back a response
that is never returned to the pool, so every call paid a new TLS handshake (docs/benchmarks.md). Here a
body is `json.dumps`ed once, the response is read (which puts the connection back), and only its status
is looked at. Creates ask for `fieldValidation=Strict`: the apiserver, not a client-side copy of its
schema, refuses a field it does not know, naming it, instead of dropping it with a warning.

Why threads and not aiohttp on kopf's event loop: both were measured (tools/bench/floor.py, 1000 pods
from a bare client): the threaded path reached ~200-240 pods/s, the event-loop one ~110-180 pods/s,
and an operator on it started 1000-pod jobs slower, though it used less CPU.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import urllib3
from kubernetes import client, config

from multinode import __version__
from multinode.api import GROUP, KIND, PLURAL, VERSION
from multinode.api.timestamps import rfc3339

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"

# Where each kind the operator creates lives: (API prefix, collection) under /namespaces/<ns>/, and the
# official client's method name, kept as the `operation` label of multinode_api_errors_total.
_COLLECTIONS = {
    "Pod": ("/api/v1", "pods", "create_namespaced_pod"),
    "Service": ("/api/v1", "services", "create_namespaced_service"),
    "ServiceAccount": ("/api/v1", "serviceaccounts", "create_namespaced_service_account"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", "create_namespaced_role"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", "create_namespaced_role_binding"),
    "Event": ("/api/v1", "events", "create_namespaced_event"),
}


class AlreadyExists(Exception):
    pass


def load_api_client(pool_size: int) -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


class KubeApi:
    def __init__(self, api_client: client.ApiClient, concurrency: int, timeout: float | None = None,
                 on_error: Callable[[str, str], None] | None = None):
        self._timeout = urllib3.Timeout(total=timeout) if timeout else None  # None: wait forever
        # Told (operation, code) of every failed call, for multinode_api_errors_total.
        self._on_error = on_error or (lambda operation, code: None)
        self._configuration = api_client.configuration
        self._pool = api_client.rest_client.pool_manager
        # Named in the apiserver's audit log and metrics (the generated client says "OpenAPI-Generator").
        self._headers = {"Accept": JSON, "User-Agent": f"multinode-operator/{__version__}"}
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kube-api")
        self._limit = asyncio.Semaphore(concurrency)

    def _request(self, method: str, path: str, body: Any, content_type: str) -> bytes:
        headers = dict(self._headers, **{"Content-Type": content_type})
        # Asked per request: for in-cluster credentials this re-reads the rotated service account token.
        for auth in self._configuration.auth_settings().values():
            if auth["in"] == "header" and auth["value"]:
                headers[auth["key"]] = auth["value"]
        kwargs = {} if self._timeout is None else {"timeout": self._timeout}
        encoded = None if body is None else json.dumps(body).encode()
        response = self._pool.request(method, self._configuration.host + path, body=encoded,
                                      headers=headers, preload_content=True, **kwargs)
        if response.status >= 400:
            raise client.ApiException(status=response.status, reason=response.reason,
                                      body=response.data.decode("utf-8", errors="replace"))
        return response.data

    async def _call(self, operation: str, method: str, path: str, body: Any, content_type: str = JSON) -> bytes:
        async with self._limit:
            loop = asyncio.get_running_loop()
            try:
                return await loop.run_in_executor(self._executor, self._request, method, path, body, content_type)
            except client.ApiException as e:
                self._on_error(operation, str(e.status))
                raise
            except (OSError, urllib3.exceptions.HTTPError) as e:  # timeouts, broken connections
                self._on_error(operation, type(e).__name__)
                raise

    async def serves_jobs(self) -> bool:
        """Whether discovery lists TrainingJobs yet. A CRD is Established a moment before discovery
        serves it; kopf scans discovery once at start and ignores CRDs it already listed, so an operator
        started in that moment would never watch TrainingJobs."""
        try:
            data = await self._call("get_api_resources", "GET", f"/apis/{GROUP}/{VERSION}", None)
        except client.ApiException as e:
            if e.status == 404:
                return False
            raise
        return any(r.get("name") == PLURAL for r in json.loads(data).get("resources", []))

    async def create_pod(self, namespace: str, body: dict) -> None:
        await self.create(namespace, body)

    async def create_service(self, namespace: str, body: dict) -> None:
        await self.create(namespace, body)

    async def create(self, namespace: str, body: dict) -> None:
        """Create a Pod, Service, ServiceAccount, Role or RoleBinding (the kinds the operator makes)."""
        prefix, collection, operation = _COLLECTIONS[body["kind"]]
        try:
            await self._call(operation, "POST", f"{prefix}/namespaces/{namespace}/{collection}?fieldValidation=Strict",
                             body)
        except client.ApiException as e:
            if e.status == 409:
                raise AlreadyExists(body["metadata"]["name"]) from e
            raise

    async def delete_pod(self, namespace: str, name: str, force: bool = False) -> None:
        """force: grace period 0, the object goes at once, for a pod whose kubelet will never confirm."""
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if force:
            body["gracePeriodSeconds"] = 0
        try:
            await self._call("delete_namespaced_pod", "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)
        except client.ApiException as e:
            if e.status != 404:
                raise

    async def delete_job(self, namespace: str, name: str) -> None:
        """ttlSecondsAfterFinished: the job goes, its pods and Service follow by owner reference."""
        try:
            await self._call("delete_namespaced_custom_object", "DELETE", _job_path(namespace, name),
                             {"propagationPolicy": "Background"})
        except client.ApiException as e:
            if e.status != 404:
                raise

    async def patch_job_status(self, namespace: str, name: str, status: dict) -> None:
        """Merge-patch .status through the status subresource (spec is never written)."""
        try:
            await self._call("patch_namespaced_custom_object_status", "PATCH", _job_path(namespace, name) + "/status",
                             {"status": status}, MERGE_PATCH)
        except client.ApiException as e:
            if e.status != 404:  # the job is gone; nothing to report on
                raise

    async def post_event(self, job_meta: dict, event_type: str, reason: str, message: str) -> None:
        now = rfc3339(datetime.now(timezone.utc))
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{job_meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": job_meta["namespace"]},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": job_meta["name"],
                               "namespace": job_meta["namespace"], "uid": job_meta.get("uid")},
            "reason": reason, "message": message[:1024], "type": event_type,
            "source": {"component": "multinode-operator"}, "reportingComponent": "multinode-operator",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        prefix, collection, operation = _COLLECTIONS["Event"]
        await self._call(operation, "POST", f"{prefix}/namespaces/{job_meta['namespace']}/{collection}", body)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _job_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def api_error_summary(e: client.ApiException) -> str:
    """The apiserver's own message (it names the offending field), not the whole HTTP dump."""
    try:
        return json.loads(e.body).get("message") or str(e.reason)
    except (TypeError, ValueError, AttributeError):
        return f"{e.status} {e.reason}"
