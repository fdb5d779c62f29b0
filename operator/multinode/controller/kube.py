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
import copy
import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client, config

from multinode import __version__
from multinode.api import GROUP, KIND, PLURAL, VERSION
from multinode.api.constants import (KUEUE_API_GROUP, KUEUE_API_VERSION, KUEUE_WORKLOAD_PLURAL, LABEL_ATTEMPT,
                                     LABEL_JOB_NAME, POD_GROUP_API_GROUP, POD_GROUP_API_VERSION, POD_GROUP_PLURAL)
from multinode.api.timestamps import rfc3339
from multinode.reconcile.ownership import controller_uid

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
# Deletes leave dependents to the garbage collector, in the background.
BACKGROUND = {"propagationPolicy": "Background"}

# A 429 (the apiserver's priority and fairness, or max-requests-inflight, shedding load) is retried here,
# after the Retry-After it names (capped), this many times; then it is an ApiError like any other and
# the reconcile's own backoff takes over.
HTTP_TOO_MANY_REQUESTS = 429
MAX_THROTTLED_RETRIES = 5
MAX_RETRY_AFTER_SECONDS = 10.0
JOB_LIST_PAGE = 500  # TrainingJobs per page of the periodic re-list


def retry_after_seconds(header: str | None, throttled: int) -> float:
    """Seconds to wait after the `throttled`-th 429 in a row: its Retry-After (whole seconds, what the
    apiserver sends), else 0.25 s doubling; never more than MAX_RETRY_AFTER_SECONDS."""
    try:
        seconds = float(header) if header is not None else 0.25 * 2 ** throttled
    except ValueError:
        seconds = 0.25 * 2 ** throttled
    return min(MAX_RETRY_AFTER_SECONDS, max(0.0, seconds))

# Where each kind the operator creates lives: (API prefix, collection) under /namespaces/<ns>/, and the
# official client's method name, kept as the `operation` label of multinode_api_errors_total.
_COLLECTIONS = {
    "Pod": ("/api/v1", "pods", "create_namespaced_pod"),
    "Service": ("/api/v1", "services", "create_namespaced_service"),
    "ConfigMap": ("/api/v1", "configmaps", "create_namespaced_config_map"),
    "ServiceAccount": ("/api/v1", "serviceaccounts", "create_namespaced_service_account"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", "create_namespaced_role_binding"),
    "Event": ("/api/v1", "events", "create_namespaced_event"),
    "PodGroup": (f"/apis/{POD_GROUP_API_GROUP}/{POD_GROUP_API_VERSION}", POD_GROUP_PLURAL,
                 "create_namespaced_pod_group"),
    "Workload": (f"/apis/{KUEUE_API_GROUP}/{KUEUE_API_VERSION}", KUEUE_WORKLOAD_PLURAL, "create_namespaced_workload"),
}


def _collection(body: dict) -> tuple[str, str, str]:
    """Where `body` is created: a PodGroup of another group than the native one is a gang scheduler's
    (Volcano's, coscheduling's: spec.scheduling), under its own apiVersion."""
    api_version = body.get("apiVersion", "")
    if body["kind"] == "PodGroup" and api_version != f"{POD_GROUP_API_GROUP}/{POD_GROUP_API_VERSION}":
        return f"/apis/{api_version}", POD_GROUP_PLURAL, "create_namespaced_pod_group"
    return _COLLECTIONS[body["kind"]]


class ApiError(Exception):
    """A call to the apiserver failed: the only error that leaves this module (the client's own types stay
    inside it). `status` is the HTTP status, or None when no answer came (a timeout, a broken connection:
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
        self._sleep: Callable[[float], None] = time.sleep  # a test replaces it
        self._limit = asyncio.Semaphore(concurrency)
        self._stream_pool: urllib3.PoolManager | None = None  # made by the first watch

    @classmethod
    def connect(cls, concurrency: int, timeout: float | None = None,
                on_error: Callable[[str, str], None] | None = None) -> KubeApi:
        """As the operator's own identity: the in-cluster service account, else the current kubeconfig."""
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        configuration = client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = concurrency
        return cls(client.ApiClient(configuration), concurrency, timeout=timeout, on_error=on_error)

    def _request(self, operation: str, method: str, path: str, body: Any, content_type: str,
                 accept: str = JSON) -> bytes:
        headers = dict(self._headers, **{"Content-Type": content_type, "Accept": accept})
        # Asked per request: for in-cluster credentials this re-reads the rotated service account token.
        for auth in self._configuration.auth_settings().values():
            if auth["in"] == "header" and auth["value"]:
                headers[auth["key"]] = auth["value"]
        kwargs: dict[str, Any] = {} if self._timeout is None else {"timeout": self._timeout}
        encoded = None if body is None else json.dumps(body).encode()
        for throttled in range(MAX_THROTTLED_RETRIES + 1):
            try:
                response = self._pool.request(method, self._configuration.host + path, body=encoded,
                                              headers=headers, preload_content=True, **kwargs)
            except (OSError, urllib3.exceptions.HTTPError) as e:  # timeouts, broken connections
                raise ApiError(operation, None, type(e).__name__, str(e)) from e
            if response.status != HTTP_TOO_MANY_REQUESTS or throttled == MAX_THROTTLED_RETRIES:
                break
            # Priority and fairness turned the request away before handling it (its queue for our flow
            # was full): wait as told, in this thread, holding the request's slot, so the operator's
            # load on the apiserver drops while it is throttled, and send the same request again.
            self._on_error(operation, str(HTTP_TOO_MANY_REQUESTS))
            self._sleep(retry_after_seconds(response.headers.get("Retry-After"), throttled))
        if response.status >= 400:
            raise ApiError(operation, response.status, str(response.reason),
                           _message(response.status, response.reason, response.data))
        return response.data

    async def _call(self, operation: str, method: str, path: str, body: Any, content_type: str = JSON,
                    accept: str = JSON) -> bytes:
        async with self._limit:
            loop = asyncio.get_running_loop()
            try:
                return await loop.run_in_executor(self._executor, self._request, operation, method, path, body,
                                                  content_type, accept)
            except ApiError as e:
                self._on_error(operation, e.code)
                raise

    async def _call_unless_gone(self, operation: str, method: str, path: str, body: Any,
                                content_type: str = JSON) -> None:
        """A write to an object that may be gone already (a 404): deleting it, or writing to a job that was
        deleted; nothing is left to do then."""
        try:
            await self._call(operation, method, path, body, content_type)
        except ApiError as e:
            if e.status != 404:
                raise

    async def serves_jobs(self) -> bool:
        """Whether discovery lists TrainingJobs yet. A CRD is Established a moment before discovery
        serves it; kopf scans discovery once at start and ignores CRDs it already listed, so an operator
        started in that moment would never watch TrainingJobs."""
        try:
            data = await self._call("get_api_resources", "GET", f"/apis/{GROUP}/{VERSION}", None)
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return any(r.get("name") == PLURAL for r in json.loads(data).get("resources", []))

    async def serves_pod_groups(self) -> bool:
        """Whether the apiserver serves native PodGroups (Kubernetes 1.36 alpha, off unless its feature gates
        and API version are enabled). Any failure to ask counts as no: the job then runs without the native
        gang (reconcile/gang_fallback.py) instead of pods waiting for a group that cannot be created."""
        try:
            data = await self._call("get_api_resources", "GET", f"/apis/{POD_GROUP_API_GROUP}/{POD_GROUP_API_VERSION}",
                                    None)
        except ApiError:
            return False
        return any(r.get("name") == POD_GROUP_PLURAL for r in json.loads(data).get("resources", []))

    async def serves_kueue(self) -> bool:
        """Whether the apiserver serves Kueue's Workloads (Kueue's CRDs are installed). Asked once at start, as
        for native PodGroups: any failure to ask counts as no, and jobs with a queue name say so."""
        try:
            data = await self._call("get_api_resources", "GET", f"/apis/{KUEUE_API_GROUP}/{KUEUE_API_VERSION}", None)
        except ApiError:
            return False
        return any(r.get("name") == KUEUE_WORKLOAD_PLURAL for r in json.loads(data).get("resources", []))

    async def patch_job_suspend(self, namespace: str, name: str, suspend: bool) -> None:
        """Set spec.suspend: the job's Kueue integration starts (false) or stops (true) it, as Kueue's
        jobframework does for the kinds it knows. The only write of a job's spec."""
        await self._call_unless_gone("patch_namespaced_custom_object", "PATCH", _job_path(namespace, name),
                                     {"spec": {"suspend": suspend}}, MERGE_PATCH)

    async def patch_workload_status(self, namespace: str, name: str, resource_version: str, status: dict) -> None:
        """Merge-patch a Kueue Workload's status, guarded by `resource_version` (409 when Kueue wrote it since:
        the reconcile is retried with the newer object)."""
        prefix, collection, _ = _COLLECTIONS["Workload"]
        await self._call("patch_namespaced_workload_status", "PATCH",
                         f"{prefix}/namespaces/{namespace}/{collection}/{name}/status",
                         {"metadata": {"resourceVersion": resource_version}, "status": status}, MERGE_PATCH)

    async def delete_workload(self, namespace: str, name: str) -> None:
        prefix, collection, _ = _COLLECTIONS["Workload"]
        await self._call_unless_gone("delete_namespaced_workload", "DELETE",
                                     f"{prefix}/namespaces/{namespace}/{collection}/{name}", BACKGROUND)

    async def priority_class_value(self, name: str) -> int | None:
        """The value of PriorityClass `name` (a Kueue Workload's spec.priority); None when there is none."""
        try:
            data = await self._call("read_priority_class", "GET",
                                    f"/apis/scheduling.k8s.io/v1/priorityclasses/{path_segment(name)}", None)
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        value = json.loads(data).get("value")
        return int(value) if value is not None else None

    async def create(self, namespace: str, body: dict) -> None:
        """Create a Pod, Service, ConfigMap, ServiceAccount, RoleBinding or PodGroup (the kinds the
        operator makes). A
        refusal, 409 AlreadyExists included, is raised as ApiError: the caller decides what it means."""
        prefix, collection, operation = _collection(body)
        try:
            await self._call(operation, "POST",
                             f"{prefix}/namespaces/{namespace}/{collection}?fieldValidation=Strict", body)
        except ApiError as e:
            e.api_version = body.get("apiVersion")
            raise

    async def read_metadata(self, namespace: str, body: dict) -> dict:
        """The metadata of the object stored under `body`'s kind and name (after its create got 409: whose
        it is, controller/ownership.py)."""
        prefix, collection, operation = _collection(body)
        data = await self._call(operation.replace("create_", "read_", 1), "GET",
                                f"{prefix}/namespaces/{namespace}/{collection}/{path_segment(body['metadata']['name'])}",
                                None)
        return json.loads(data).get("metadata") or {}

    async def prune_gang_groups(self, namespace: str, api_version: str, job: str, attempt: int,
                                owner_uid: str) -> list[str]:
        """Delete job `job`'s PodGroups of `api_version` (a gang scheduler's) from attempts before `attempt`;
        the names deleted. Only groups the job `owner_uid` controls: one with the job's label and another
        owner is not the job's to delete. Nothing when the kind is not served (its CRD was uninstalled)."""
        path = f"/apis/{api_version}/namespaces/{namespace}/{POD_GROUP_PLURAL}"
        try:
            data = await self._call("list_namespaced_pod_group", "GET",
                                    f"{path}?labelSelector={LABEL_JOB_NAME}%3D{job}", None)
        except ApiError as e:
            if e.status == 404:
                return []
            raise
        stale = []
        for item in json.loads(data).get("items", []):
            meta = item.get("metadata") or {}
            seen = (meta.get("labels") or {}).get(LABEL_ATTEMPT, "")
            if (seen.isdigit() and int(seen) < attempt and not meta.get("deletionTimestamp")
                    and controller_uid(meta) == owner_uid):
                stale.append(meta["name"])
        for name in stale:
            await self._call_unless_gone("delete_namespaced_pod_group", "DELETE", f"{path}/{name}", BACKGROUND)
        return stale

    async def delete_pod(self, namespace: str, name: str, force: bool = False) -> None:
        """force: grace period 0, the object goes at once, for a pod whose kubelet will never confirm."""
        body: dict[str, Any] = {**BACKGROUND, **({"gracePeriodSeconds": 0} if force else {})}
        await self._call_unless_gone("delete_namespaced_pod", "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                                     body)

    async def delete_config_map(self, namespace: str, name: str) -> None:
        await self._call_unless_gone("delete_namespaced_config_map", "DELETE",
                                     f"/api/v1/namespaces/{namespace}/configmaps/{name}", None)

    async def delete_pod_group(self, namespace: str, name: str) -> None:
        prefix, collection, _ = _COLLECTIONS["PodGroup"]
        await self._call_unless_gone("delete_namespaced_pod_group", "DELETE",
                                     f"{prefix}/namespaces/{namespace}/{collection}/{name}", BACKGROUND)

    async def delete_job(self, namespace: str, name: str) -> None:
        """ttlSecondsAfterFinished: the job goes, its pods and Service follow by owner reference."""
        await self._call_unless_gone("delete_namespaced_custom_object", "DELETE", _job_path(namespace, name),
                                     BACKGROUND)

    async def list_jobs(self, namespace: str | None) -> list[dict]:
        """Every TrainingJob of `namespace` (None: of the cluster), page by page (resync.py)."""
        where = f"/namespaces/{namespace}" if namespace is not None else ""
        jobs: list[dict] = []
        cont = None
        while True:
            query = urlencode({"limit": JOB_LIST_PAGE, **({"continue": cont} if cont else {})})
            page = json.loads(await self._call("list_jobs", "GET", f"/apis/{GROUP}/{VERSION}{where}/{PLURAL}?{query}",
                                               None))
            jobs.extend(page.get("items") or ())
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return jobs

    async def get_job_uid(self, namespace: str, name: str) -> str | None:
        """The uid of TrainingJob `name`, None when there is none. A LIST by name, not a GET: the operator's
        role lists and watches jobs and never reads one by name (charts/multinode-operator RBAC)."""
        query = urlencode({"fieldSelector": f"metadata.name={name}"})
        data = await self._call("list_jobs", "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}?{query}",
                                None)
        items = json.loads(data).get("items") or ()
        return str(items[0]["metadata"]["uid"]) if items else None

    async def patch_job_status(self, namespace: str, name: str, status: dict) -> None:
        """Merge-patch .status through the status subresource (spec is never written)."""
        await self._call_unless_gone("patch_namespaced_custom_object_status", "PATCH",
                                     _job_path(namespace, name) + "/status", {"status": status}, MERGE_PATCH)

    async def read_log(self, namespace: str, pod: str, container: str, *, tail_lines: int, limit_bytes: int,
                       since_time: str | None = None) -> str:
        """The container's log lines, each prefixed by its RFC3339Nano timestamp: at most the last
        `tail_lines` since `since_time` (whole seconds; the caller drops lines it has read already)."""
        query = f"container={container}&timestamps=true&tailLines={tail_lines}&limitBytes={limit_bytes}"
        if since_time:
            query += f"&sinceTime={since_time}"
        data = await self._call("read_namespaced_pod_log", "GET",
                                f"/api/v1/namespaces/{namespace}/pods/{pod}/log?{query}", None, accept="*/*")
        return data.decode("utf-8", errors="replace")

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

    async def get_lease(self, namespace: str, name: str) -> dict | None:
        """The leader election Lease (None: there is none)."""
        try:
            data = await self._call("read_namespaced_lease", "GET", _lease_path(namespace, name), None)
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        lease: dict = json.loads(data)
        return lease

    async def create_lease(self, namespace: str, name: str, spec: dict) -> None:
        """Create the Lease; 409 (another replica was faster) is raised for the caller."""
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        await self._call("create_namespaced_lease", "POST", _lease_path(namespace, ""), body)

    async def replace_lease(self, namespace: str, name: str, resource_version: str, spec: dict) -> None:
        """PUT the Lease's spec, guarded by the resourceVersion read: 409 if another replica wrote it since."""
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version},
                "spec": spec}
        await self._call("replace_namespaced_lease", "PUT", _lease_path(namespace, name), body)

    # The informers' side (informer.py): blocking calls, each made in an informer's own thread, over a pool
    # of their own, so a watch held open for minutes never takes a connection from the request threads.

    def list_sync(self, path: str) -> dict:
        """GET a collection (one page of it), decoded."""
        decoded: dict = json.loads(self._request("list", "GET", path, None, JSON))
        return decoded

    def watch_lines(self, path: str, read_timeout: float) -> Iterator[bytes]:
        """The lines of a watch stream (one JSON event each) until the server ends it. Raises ApiError for
        a refused watch or a broken stream; a read stalled for `read_timeout` seconds is a broken stream."""
        headers = dict(self._headers)
        for auth in self._configuration.auth_settings().values():
            if auth["in"] == "header" and auth["value"]:
                headers[auth["key"]] = auth["value"]
        if self._stream_pool is None:
            streams = copy.copy(self._configuration)
            streams.connection_pool_maxsize = 8
            self._stream_pool = client.ApiClient(streams).rest_client.pool_manager
        try:
            response = self._stream_pool.request("GET", self._configuration.host + path, headers=headers,
                                                 preload_content=False,
                                                 timeout=urllib3.Timeout(connect=30, read=read_timeout))
            if response.status >= 400:
                data = response.read()
                raise ApiError("watch", response.status, str(response.reason),
                               _message(response.status, response.reason, data))
            pending = b""
            for chunk in response.stream(1 << 16):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                yield from (line for line in lines if line)
            response.release_conn()
        except (OSError, urllib3.exceptions.HTTPError) as e:
            raise ApiError("watch", None, type(e).__name__, str(e)) from e

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def path_segment(name: str) -> str:
    """`name` as one segment of a request path. The names come from a job's spec (its podTemplate's
    priorityClassName): quoted, so a '/' or '?' cannot reach another path or add a query, and '.' and '..'
    refused, which the HTTP client would resolve to the parent path. The CRD admits only DNS names there;
    this holds for objects stored before it did."""
    if name in (".", ".."):
        raise ValueError(f"{name!r} is not an object name")
    return quote(name, safe="")


def _job_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def _lease_path(namespace: str, name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases" + (f"/{name}" if name else "")


def _message(status: int, reason: str | None, data: bytes) -> str:
    """The apiserver's own message (it names the offending field), not the whole HTTP dump."""
    try:
        return json.loads(data.decode("utf-8", errors="replace")).get("message") or str(reason)
    except (TypeError, ValueError, AttributeError):
        return f"{status} {reason}"
