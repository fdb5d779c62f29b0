"""The operator's writes to Kubernetes: plain JSON over aiohttp, on the operator's event loop.

The official client supplies the credentials (kubeconfig or in-cluster, with token refresh) and nothing
else. Its typed path validated every body against its pydantic models and serialised it again, and its
`_preload_content=False` mode never returned a connection to the pool, so every call paid a new TLS
handshake; its blocking calls also needed a thread pool, whose threads fought kopf's event loop for the
GIL during a large start (docs/benchmarks.md). Here a body is `json.dumps`ed once and sent from the
event loop over pooled keep-alive connections (aiohttp, which kopf already runs on), and only the
response's status is looked at. Creates ask for `fieldValidation=Strict`: the apiserver, not a
client-side copy of its schema, refuses a field it does not know, naming it, instead of dropping it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import aiohttp
from kubernetes import client, config

from multinode import __version__
from multinode.api import GROUP, KIND, PLURAL, VERSION

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
        self._timeout = aiohttp.ClientTimeout(total=timeout)  # total=None: wait forever
        # Told (operation, code) of every failed call, for multinode_api_errors_total.
        self._on_error = on_error or (lambda operation, code: None)
        self._configuration = api_client.configuration
        self._concurrency = concurrency
        # Named in the apiserver's audit log and metrics (the generated client says "OpenAPI-Generator").
        self._headers = {"Accept": JSON, "User-Agent": f"multinode-operator/{__version__}"}
        self._limit = asyncio.Semaphore(concurrency)
        self._session: aiohttp.ClientSession | None = None

    def _ssl_context(self) -> ssl.SSLContext | bool:
        c = self._configuration
        if not c.verify_ssl:
            return False
        context = ssl.create_default_context(cafile=c.ssl_ca_cert)
        if c.cert_file:
            context.load_cert_chain(c.cert_file, c.key_file)
        return context

    def _session_in_loop(self) -> aiohttp.ClientSession:
        # Made on first use, inside the running loop (aiohttp binds a session to it).
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._concurrency, ssl=self._ssl_context())
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    async def _call(self, operation: str, method: str, path: str, body: Any, content_type: str = JSON) -> None:
        headers = dict(self._headers, **{"Content-Type": content_type})
        # Asked per request: for in-cluster credentials this re-reads the rotated service account token.
        for auth in self._configuration.auth_settings().values():
            if auth["in"] == "header" and auth["value"]:
                headers[auth["key"]] = auth["value"]
        async with self._limit:
            try:
                async with self._session_in_loop().request(method, self._configuration.host + path,
                                                           data=json.dumps(body), headers=headers) as response:
                    data = await response.read()
                    if response.status >= 400:
                        raise client.ApiException(status=response.status, reason=response.reason,
                                                  body=data.decode("utf-8", errors="replace"))
            except client.ApiException as e:
                self._on_error(operation, str(e.status))
                raise
            except (OSError, aiohttp.ClientError, asyncio.TimeoutError) as e:  # timeouts, broken connections
                self._on_error(operation, type(e).__name__)
                raise

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

    async def delete_pod(self, namespace: str, name: str) -> None:
        try:
            await self._call("delete_namespaced_pod", "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                             {"propagationPolicy": "Background"})
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
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
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
        if self._session is not None:
            await self._session.close()


def _job_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def api_error_summary(e: client.ApiException) -> str:
    """The apiserver's own message (it names the offending field), not the whole HTTP dump."""
    try:
        return json.loads(e.body).get("message") or str(e.reason)
    except (TypeError, ValueError, AttributeError):
        return f"{e.status} {e.reason}"
