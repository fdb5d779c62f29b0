"""An HTTP reverse proxy in front of the apiserver that injects API faults on request, for tests.

The proxy listens on 127.0.0.1:<free port> in plain HTTP and forwards every request to the real
apiserver over HTTPS (verified with the cluster CA), passing the client's Authorization header
through. Responses are streamed: a watch (`?watch=true`) is relayed event by event as it arrives.
It runs its own event loop in a background thread; `stop()` (or leaving the `with` block) closes the
listening socket, every client and upstream connection, and joins the thread.

Faults are rules set at runtime from the test thread (`inject`, `clear`); each request is matched
against the rules in order, and the first rule that matches *and fires* (within its `times` budget: its
`first` matches always, later ones by a roll against `probability`) decides what happens:

- `status`: reply `status` (409, 429, 500, 503, ...) with a Kubernetes Status body; 429 carries
  `Retry-After`. With `forward=True` the request is forwarded first and only its response is replaced:
  the write happened, the client is told otherwise (a create that raced another gets AlreadyExists).
- `delay`: hold the request `seconds`, then forward it. If the client gave up meanwhile (its timeout is
  shorter), the request still reaches the apiserver: a late write, as with a real lost response.
- `drop_watch`: forward a watch, then cut the connection abruptly (no terminating chunk) after `events`
  events or `seconds` seconds, whichever comes first.
- `gone_on_watch`: answer a watch that resumes from a resourceVersion with the apiserver's
  `410 Gone` ERROR event ("too old resource version") and end the stream.
- `lose_events`: forward a watch, leaving out every event whose object's name matches `object_regex`: the
  stream goes on, the client never hears of that object (a lost event, which no real apiserver makes on
  request). Each event left out counts as injected.

Each rule counts what it injected and what it let pass (matched, but not fired), and a delay rule how
often the client had given up before the late answer came (`client_gone`); the proxy counts every
request it forwarded, and how many requests it is holding right now (`held`).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from urllib.parse import parse_qs

import aiohttp
import yaml
from aiohttp import web
from yarl import URL

KINDS = ("status", "delay", "drop_watch", "gone_on_watch", "lose_events")
REASONS = {400: "BadRequest", 404: "NotFound", 409: "AlreadyExists", 410: "Gone", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}
# Not forwarded in either direction: connection-level headers, and what the proxy recomputes.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding", "content-encoding"}


@dataclass
class Fault:
    kind: str
    method: str | None = None  # None: any method
    path_regex: str = ".*"  # searched in the request path (no query string)
    watch: bool | None = None  # True: only watch requests; False: only non-watch requests
    times: int | None = None  # at most this many injections; None: no limit
    probability: float = 1.0
    first: int = 0  # the first `first` matching requests get the fault for sure; `probability` decides after
    # kind=status
    status: int = 500
    reason: str | None = None  # default from the status code (409 → AlreadyExists)
    message: str | None = None
    retry_after: int | None = None  # seconds; a 429 gets 1 unless set
    forward: bool = False
    # kind=delay: hold this long; kind=drop_watch: cut after this long (None: only after `events`)
    seconds: float | None = None
    # kind=drop_watch: cut after this many events (None: only after `seconds`)
    events: int | None = None
    # kind=lose_events: the names (metadata.name, searched) of the objects whose events are left out
    object_regex: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {KINDS}")
        if self.kind == "delay" and not self.seconds:
            raise ValueError("a delay fault needs seconds")
        if self.kind == "drop_watch" and self.seconds is None and self.events is None:
            raise ValueError("a drop_watch fault needs events or seconds")
        if self.kind == "lose_events" and not self.object_regex:
            raise ValueError("a lose_events fault needs object_regex")
        if not 0 < self.probability <= 1:
            raise ValueError("probability must be in (0, 1]")


@dataclass
class Rule:
    """An injected Fault with its counters. Read the counters from any thread."""

    fault: Fault
    _pattern: re.Pattern = field(repr=False)
    _lock: threading.Lock = field(repr=False)
    _fired: int = 0  # budget used (decisions to inject)
    _injected: int = 0  # faults actually delivered
    _passed: int = 0  # matched, but let through unharmed
    _client_gone: int = 0  # delay: the client had given up (disconnected) before the late answer came

    @property
    def injected(self) -> int:
        with self._lock:
            return self._injected

    @property
    def passed(self) -> int:
        with self._lock:
            return self._passed

    @property
    def client_gone(self) -> int:
        with self._lock:
            return self._client_gone

    def matches(self, method: str, path: str, watch: bool) -> bool:
        f = self.fault
        if f.method is not None and f.method.upper() != method:
            return False
        if f.watch is not None and f.watch != watch:
            return False
        if f.kind in ("drop_watch", "gone_on_watch", "lose_events") and not watch:
            return False
        return self._pattern.search(path) is not None

    def __str__(self) -> str:
        f = self.fault
        what = {"status": f"{f.status}{' after forwarding' if f.forward else ''}",
                "delay": f"{f.seconds}s", "gone_on_watch": "410 Gone", "lose_events": f"of {f.object_regex}",
                "drop_watch": " or ".join(x for x in (f.events and f"after {f.events} events",
                                                      f.seconds and f"after {f.seconds}s") if x)}[f.kind]
        gone = f", client gave up {self.client_gone}" if f.kind == "delay" else ""
        return (f"{f.kind} {what} on {f.method or '*'} {f.path_regex}: injected {self.injected}, "
                f"passed {self.passed}{gone}")


def _status_body(code: int, reason: str, message: str, retry_after: int | None = None) -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return body


class FaultProxy:
    def __init__(self, kubeconfig: str, *, seed: int | None = None):
        config = yaml.safe_load(Path(kubeconfig).read_text())
        context_name = config.get("current-context") or config["contexts"][0]["name"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        self.upstream = cluster["server"].rstrip("/")
        self._ca_file = cluster.get("certificate-authority")
        self._token = user.get("token")
        self._sock: socket.socket | None = None
        self.port = 0  # known once started
        self.seed = random.randrange(2**32) if seed is None else seed
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._forwarded = 0
        self._held = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._handlers: set[asyncio.Task] = set()

    # -- from the test thread ------------------------------------------------------------------

    @property
    def url(self) -> str:
        if not self.port:
            raise RuntimeError("the proxy has no address before start()")
        return f"http://127.0.0.1:{self.port}"

    @property
    def auth_headers(self) -> dict[str, str]:
        """What a raw HTTP client sends to the proxy to be let through (the kubeconfig's token)."""
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def inject(self, fault: Fault) -> Rule:
        rule = Rule(fault, re.compile(fault.path_regex), self._lock)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Remove every rule (their counters stay readable on the Rule objects)."""
        with self._lock:
            self._rules = []

    @property
    def forwarded(self) -> int:
        with self._lock:
            return self._forwarded

    @property
    def held(self) -> int:
        """Requests being held or forwarded late right now (delay faults not yet answered)."""
        with self._lock:
            return self._held

    def kubeconfig(self, path: Path) -> str:
        """A kubeconfig for the proxy: plain HTTP to it, the same credentials as the admin one."""
        config = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "faultproxy", "cluster": {"server": self.url}}],
            "users": [{"name": "faultproxy-user", "user": {"token": self._token}}],
            "contexts": [{"name": "faultproxy", "context": {"cluster": "faultproxy", "user": "faultproxy-user"}}],
            "current-context": "faultproxy",
        }
        path.write_text(yaml.safe_dump(config))
        return str(path)

    def start(self) -> FaultProxy:
        if self._thread is not None:
            raise RuntimeError("already started")
        # Bound here, before the thread starts: the port is ours, no window for another process to take it.
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._run, name=f"faultproxy-{self.port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("fault proxy did not start within 30s")
        if self._startup_error is not None:
            self._thread.join(timeout=10)
            raise RuntimeError("fault proxy failed to start") from self._startup_error
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout=30)
        if self._thread.is_alive():
            raise RuntimeError("fault proxy thread did not stop within 30s")
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def report(self) -> str:
        with self._lock:
            rules = list(self._rules)
        lines = [f"forwarded {self.forwarded} requests (seed {self.seed})"] + [f"  {r}" for r in rules]
        return "\n".join(lines)

    # -- on the proxy's own loop ---------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())  # resolver threads, if any
            loop.close()
            if self._sock is not None:
                self._sock.close()  # closed already by the server, unless startup failed before that

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        runner: web.BaseRunner | None = None
        session: aiohttp.ClientSession | None = None
        try:
            ssl_context = ssl.create_default_context(cafile=self._ca_file) if self._ca_file else None
            connector = aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else True)
            # No total timeout: watches are long. Requests are as patient as their clients.
            session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
            self._session = session
            runner = web.ServerRunner(web.Server(self._handle), shutdown_timeout=1.0)
            await runner.setup()
            await web.SockSite(runner, self._sock).start()
        except BaseException as e:  # noqa: BLE001 - reported to start()
            self._startup_error = e
            self._ready.set()
            if runner is not None:
                await runner.cleanup()
            if session is not None:
                await session.close()
            return
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            # Stop listening, cut every request in flight (watches, held requests), then the upstream pool.
            for site in list(runner.sites):
                await site.stop()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await runner.cleanup()
            await session.close()

    def _choose(self, method: str, path: str, watch: bool) -> Rule | None:
        with self._lock:
            for rule in self._rules:
                if not rule.matches(method, path, watch):
                    continue
                f = rule.fault
                budget_left = f.times is None or rule._fired < f.times
                matched = rule._fired + rule._passed  # matching requests before this one
                sure = matched < f.first or f.probability >= 1
                if budget_left and (sure or self._random.random() < f.probability):
                    rule._fired += 1
                    return rule
                rule._passed += 1
            return None

    def _count(self, rule: Rule, injected: bool) -> None:
        with self._lock:
            if injected:
                rule._injected += 1
            else:
                rule._passed += 1

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        task = asyncio.current_task()
        self._handlers.add(task)
        try:
            return await self._dispatch(request)
        finally:
            self._handlers.discard(task)

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        query = parse_qs(request.query_string)
        watch = query.get("watch", [""])[0] in ("true", "1")
        rule = self._choose(request.method, request.path, watch)
        body = await request.read()
        f = rule.fault if rule else None

        if f is not None and f.kind == "status" and not f.forward:
            self._count(rule, True)
            return self._error_response(f, request.path)

        if f is not None and f.kind == "gone_on_watch":
            if "resourceVersion" not in query:  # nothing to be too old: a fresh watch
                self._count(rule, False)
            else:
                self._count(rule, True)
                rv = query["resourceVersion"][0]
                event = {"type": "ERROR", "object": _status_body(
                    410, "Expired", f"too old resource version: {rv} (injected by faultproxy)")}
                response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
                response.enable_chunked_encoding()
                await response.prepare(request)
                await response.write(json.dumps(event).encode() + b"\n")
                await response.write_eof()
                return response

        if f is not None and f.kind == "delay":
            self._count(rule, True)
            with self._lock:
                self._held += 1
            try:
                await asyncio.sleep(f.seconds)
                # Forwarded even if the client has given up: the apiserver gets a late request.
                response = await self._forward(request, body, watch, None)
                if request.transport is None or request.transport.is_closing():
                    with self._lock:
                        rule._client_gone += 1
                return response
            finally:
                with self._lock:
                    self._held -= 1

        response = await self._forward(request, body, watch, rule)
        if f is not None and f.kind == "status":  # forward=True: the write happened; the client hears otherwise
            self._count(rule, True)
            return self._error_response(f, request.path)
        return response

    def _error_response(self, f: Fault, path: str) -> web.Response:
        reason = f.reason or REASONS.get(f.status, "InternalError")
        retry_after = f.retry_after if f.retry_after is not None else (1 if f.status == 429 else None)
        message = f.message or f"{reason} (injected by faultproxy) on {path}"
        headers = {"Content-Type": "application/json"}
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        return web.Response(status=f.status, headers=headers,
                            body=json.dumps(_status_body(f.status, reason, message, retry_after)).encode())

    async def _forward(self, request: web.BaseRequest, body: bytes, watch: bool,
                       rule: Rule | None) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        url = self.upstream + request.raw_path  # path and query string exactly as the client sent them
        with self._lock:
            self._forwarded += 1
        # Add nothing of aiohttp's own: no Content-Type for a body sent without one (the apiserver takes that
        # as JSON, but refuses application/octet-stream), and no Accept-Encoding (relayed bodies stay plain).
        skip = {"Accept-Encoding", "User-Agent", "Content-Type"}
        async with self._session.request(request.method, URL(url, encoded=True), headers=headers, data=body or None,
                                         skip_auto_headers=skip, allow_redirects=False) as upstream:
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
            if not watch or upstream.status != 200:
                return web.Response(status=upstream.status, headers=out_headers, body=await upstream.read())
            response = web.StreamResponse(status=upstream.status, headers=out_headers)
            response.enable_chunked_encoding()
            await response.prepare(request)
            if rule is not None and rule.fault.kind == "lose_events":
                return await self._relay_losing(upstream, response, rule)
            dropping = rule is not None and rule.fault.kind == "drop_watch"
            if not dropping:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
            return await self._relay_then_drop(request, upstream, response, rule)

    async def _relay_losing(self, upstream: aiohttp.ClientResponse, response: web.StreamResponse,
                            rule: Rule) -> web.StreamResponse:
        names = re.compile(rule.fault.object_regex or "")
        while line := await upstream.content.readline():
            event = json.loads(line)
            name = ((event.get("object") or {}).get("metadata") or {}).get("name") or ""
            lost = event.get("type") in ("ADDED", "MODIFIED", "DELETED") and names.search(name) is not None
            self._count(rule, lost)
            if not lost:
                await response.write(line)
        await response.write_eof()
        return response

    async def _relay_then_drop(self, request: web.BaseRequest, upstream: aiohttp.ClientResponse,
                               response: web.StreamResponse, rule: Rule) -> web.StreamResponse:
        f = rule.fault
        events = 0
        loop = asyncio.get_running_loop()
        deadline = None if f.seconds is None else loop.time() + f.seconds
        cut = False
        while True:
            if f.events is not None and events >= f.events:
                cut = True
                break
            timeout = None if deadline is None else deadline - loop.time()
            if timeout is not None and timeout <= 0:
                cut = True
                break
            try:
                line = await asyncio.wait_for(upstream.content.readline(), timeout)
            except TimeoutError:
                cut = True
                break
            if not line:  # the apiserver ended the stream first
                break
            await response.write(line)
            events += 1
        self._count(rule, cut)
        if not cut:
            await response.write_eof()
            return response
        # Abruptly: no terminating chunk, the TCP connection just goes away.
        if request.transport is not None:
            request.transport.abort()
        return response
