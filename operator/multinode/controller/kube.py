"""The operator's writes to Kubernetes, as coroutines over the official client (run in threads).

Responses are not deserialised into client models (`_preload_content=False`): the operator never reads
them, and turning a pod into Python objects costs more than creating it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import urllib3
from kubernetes import client, config

from multinode.api import GROUP, KIND, PLURAL, VERSION


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
        self._timeout = timeout  # seconds per call (urllib3 total timeout); None: wait forever
        # Told (operation, code) of every failed call, for multinode_api_errors_total.
        self._on_error = on_error or (lambda operation, code: None)
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._rbac = client.RbacAuthorizationV1Api(api_client)
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kube-api")
        self._limit = asyncio.Semaphore(concurrency)

    async def _call(self, fn, *args, **kwargs):
        async with self._limit:
            loop = asyncio.get_running_loop()
            try:
                return await loop.run_in_executor(self._executor, lambda: fn(
                    *args, _preload_content=False, _request_timeout=self._timeout, **kwargs))
            except client.ApiException as e:
                self._on_error(fn.__name__, str(e.status))
                raise
            except (OSError, urllib3.exceptions.HTTPError) as e:  # timeouts, broken connections
                self._on_error(fn.__name__, type(e).__name__)
                raise

    async def create_pod(self, namespace: str, body: dict) -> None:
        await self._create(self._core.create_namespaced_pod, namespace, body)

    async def create_service(self, namespace: str, body: dict) -> None:
        await self._create(self._core.create_namespaced_service, namespace, body)

    async def create(self, namespace: str, body: dict) -> None:
        """Create a Pod, ServiceAccount, Role or RoleBinding (the kinds the operator makes)."""
        creators = {
            "Pod": self._core.create_namespaced_pod,
            "ServiceAccount": self._core.create_namespaced_service_account,
            "Role": self._rbac.create_namespaced_role,
            "RoleBinding": self._rbac.create_namespaced_role_binding,
        }
        await self._create(creators[body["kind"]], namespace, body)

    async def _create(self, fn, namespace: str, body: dict) -> None:
        try:
            await self._call(fn, namespace, body)
        except client.ApiException as e:
            if e.status == 409:
                raise AlreadyExists(body["metadata"]["name"]) from e
            raise

    async def delete_pod(self, namespace: str, name: str) -> None:
        try:
            await self._call(self._core.delete_namespaced_pod, name, namespace,
                             body={"propagationPolicy": "Background"})
        except client.ApiException as e:
            if e.status != 404:
                raise

    async def delete_job(self, namespace: str, name: str) -> None:
        """ttlSecondsAfterFinished: the job goes, its pods and Service follow by owner reference."""
        try:
            await self._call(self._custom.delete_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name,
                             body={"propagationPolicy": "Background"})
        except client.ApiException as e:
            if e.status != 404:
                raise

    async def patch_job_status(self, namespace: str, name: str, status: dict) -> None:
        """Merge-patch .status through the status subresource (spec is never written)."""
        try:
            await self._call(self._custom.patch_namespaced_custom_object_status,
                             GROUP, VERSION, namespace, PLURAL, name, {"status": status})
        except client.ApiException as e:
            if e.status != 404:  # the job is gone; nothing to report on
                raise

    async def post_event(self, job_meta: dict, event_type: str, reason: str, message: str) -> None:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"name": f"{job_meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": job_meta["namespace"]},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": job_meta["name"],
                               "namespace": job_meta["namespace"], "uid": job_meta.get("uid")},
            "reason": reason, "message": message[:1024], "type": event_type,
            "source": {"component": "multinode-operator"}, "reportingComponent": "multinode-operator",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        await self._call(self._core.create_namespaced_event, job_meta["namespace"], body)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def api_error_summary(e: client.ApiException) -> str:
    """The apiserver's own message (it names the offending field), not the whole HTTP dump."""
    try:
        return json.loads(e.body).get("message") or str(e.reason)
    except (TypeError, ValueError, AttributeError):
        return f"{e.status} {e.reason}"
