"""The operator's writes to Kubernetes: plain JSON on keep-alive connections, one per thread.

The official client is used for what it does well (kubeconfig and in-cluster credentials, token refresh,
the TLS settings) but not for the request itself: its typed path validates every body against its
pydantic models and serialises it again, and its urllib3 pool's per-request machinery cost as much client
CPU as the request (connections.py says how much). Here a body is encoded once (orjson), sent on the
thread's own connection (connections.py; the client's pool only where the kubeconfig names a proxy), the
response is read whole, and only its status is looked at. Creates ask for `fieldValidation=Strict`: the
apiserver, not a client-side copy of its schema, refuses a field it does not know, naming it, instead of
dropping it with a warning.

Why threads and not aiohttp on kopf's event loop: both were measured (tools/bench/floor.py, 1000 pods
from a bare client): the threaded path reached ~200-240 pods/s, the event-loop one ~110-180 pods/s,
and an operator on it started 1000-pod jobs slower, though it used less CPU.

This module is the transport (credentials, the connections, 429 retries, the informers' LIST and WATCH streams);
the requests themselves are in kube_core.py (built-in kinds) and kube_custom.py (custom resources).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPException
from typing import Any

import orjson
import urllib3
from kubernetes import client, config
from kubernetes.utils.keepalive import tcp_keepalive_socket_options

from multinode import __version__
from multinode.controller.connections import ThreadConnections
from multinode.controller.kube_calls import JSON, ApiError
from multinode.controller.kube_core import CoreRequests
from multinode.controller.kube_custom import CustomObjectRequests

__all__ = ["ApiError", "KubeApi", "retry_after_seconds"]

# A 429 (the apiserver's priority and fairness, or max-requests-inflight, shedding load) is retried here,
# after the Retry-After it names (capped), this many times; then it is an ApiError like any other and
# the reconcile's own backoff takes over.
HTTP_TOO_MANY_REQUESTS = 429
MAX_THROTTLED_RETRIES = 5
MAX_RETRY_AFTER_SECONDS = 10.0
# How long the auth headers are reused before the configuration is asked again (its refresh hook re-reads a
# rotated token; the official client's in-cluster loader itself re-reads the token file once a minute).
CREDENTIALS_SECONDS = 10.0


def retry_after_seconds(header: str | None, throttled: int) -> float:
    """Seconds to wait after the `throttled`-th 429 in a row: its Retry-After (whole seconds, what the
    apiserver sends), else 0.25 s doubling; never more than MAX_RETRY_AFTER_SECONDS."""
    try:
        seconds = float(header) if header is not None else 0.25 * 2 ** throttled
    except ValueError:
        seconds = 0.25 * 2 ** throttled
    return min(MAX_RETRY_AFTER_SECONDS, max(0.0, seconds))


class KubeApi(CoreRequests, CustomObjectRequests):
    """The operator's client: the requests of kube_core.py and kube_custom.py, sent by `_call`."""

    def __init__(self, api_client: client.ApiClient, concurrency: int, timeout: float | None = None,
                 on_error: Callable[[str, str], None] | None = None):
        # Seconds a connect or a read may take (None: wait forever).
        self._timeout = timeout or None
        # Told (operation, code) of every failed call, for multinode_api_errors_total.
        self._on_error = on_error or (lambda operation, code: None)
        self._configuration = api_client.configuration
        # The requests' connections: ours (connections.py) where the configuration allows, else the client's
        # pool (a proxy; a test's fake pool).
        self._pool: Any = _connections(self._configuration) or api_client.rest_client.pool_manager
        # Named in the apiserver's audit log and metrics (the generated client says "OpenAPI-Generator").
        self._headers = {"Accept": JSON, "User-Agent": f"multinode-operator/{__version__}"}
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kube-api")
        self._sleep: Callable[[float], None] = time.sleep  # a test replaces it
        self._clock: Callable[[], float] = time.monotonic  # and this
        self._limit = asyncio.Semaphore(concurrency)
        self._stream_pool: urllib3.PoolManager | None = None  # made by the first watch
        self._asked_credentials: tuple[float, dict[str, str]] = (-CREDENTIALS_SECONDS, {})

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

    def _credentials(self) -> dict[str, str]:
        """The auth headers, asked of the configuration at most every CREDENTIALS_SECONDS: asking runs its
        refresh hook, which re-reads the service account token in a pod (rotated by the kubelet long before it
        expires) and re-parses the kubeconfig's user outside one, about 75 µs: per request, a quarter of a
        pod create's client CPU. Threads racing past the deadline each ask once; each gets a whole answer."""
        asked_at, headers = self._asked_credentials
        now = self._clock()
        if now - asked_at >= CREDENTIALS_SECONDS:
            headers = {auth["key"]: auth["value"] for auth in self._configuration.auth_settings().values()
                       if auth["in"] == "header" and auth["value"]}
            self._asked_credentials = (now, headers)
        return headers

    def _request(self, operation: str, method: str, path: str, body: Any, content_type: str,
                 accept: str = JSON) -> bytes:
        headers = dict(self._headers, **self._credentials(), **{"Content-Type": content_type, "Accept": accept})
        kwargs: dict[str, Any] = {} if self._timeout is None else {"timeout": self._timeout}
        encoded = None if body is None else orjson.dumps(body)
        for throttled in range(MAX_THROTTLED_RETRIES + 1):
            try:
                response = self._pool.request(method, self._configuration.host + path, body=encoded,
                                              headers=headers, preload_content=True, **kwargs)
            except (OSError, HTTPException, urllib3.exceptions.HTTPError) as e:  # timeouts, broken connections
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

    # The informers' side (informer.py): blocking calls, each made in an informer's own thread, over a pool
    # of their own, so a watch held open for minutes never takes a connection from the request threads.

    def list_sync(self, path: str) -> dict:
        """GET a collection (one page of it), decoded."""
        decoded: dict = orjson.loads(self._request("list", "GET", path, None, JSON))
        return decoded

    def watch_lines(self, path: str, read_timeout: float) -> Iterator[bytes]:
        """The lines of a watch stream (one JSON event each) until the server ends it. Raises ApiError for
        a refused watch or a broken stream; a read stalled for `read_timeout` seconds is a broken stream."""
        headers = dict(self._headers, **self._credentials())
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
        if isinstance(self._pool, ThreadConnections):
            self._pool.close()


def _connections(configuration: Any) -> ThreadConnections | None:
    """Our connections for a kubernetes.client.Configuration, with the socket options its own pool would set
    (RESTClientObject: the configuration's, else TCP keep-alive when it asks for it)."""
    if not isinstance(configuration, client.Configuration):
        return None
    if configuration.socket_options is not None:
        options = list(configuration.socket_options)
    else:
        options = tcp_keepalive_socket_options() if getattr(configuration, "keep_alive", False) else []
    return ThreadConnections.for_configuration(configuration, options)


def _message(status: int, reason: str | None, data: bytes) -> str:
    """The apiserver's own message (it names the offending field), not the whole HTTP dump."""
    try:
        return json.loads(data.decode("utf-8", errors="replace")).get("message") or str(reason)
    except (TypeError, ValueError, AttributeError):
        return f"{status} {reason}"
