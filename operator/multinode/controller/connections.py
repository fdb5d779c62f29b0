"""Keep-alive HTTP/1.1 connections to the apiserver, one per thread, on the standard library's http.client.

Why not the official client's urllib3 pool for the operator's requests: its per-request machinery (URL
parsing, Retry and Timeout objects, the pool's queue, its response wrapper) cost as much client CPU as the
request itself. 1000 pod creates from 32 threads took 0.52-0.62 ms of the process's CPU per create through
the pool and 0.27-0.37 ms here, side by side against one apiserver (docs/benchmarks.md, "CPU per start").
A thread's connection is used only by that thread (the request threads and each informer's LIST), so
nothing is locked per request.

The TLS and socket settings are the official client's Configuration's, read the way its RESTClientObject
reads them (the CA, the client certificate, verify_ssl, tls_server_name, keep-alive). A configuration this
module does not serve (a proxy, an assert_hostname other than False) gets None from `for_configuration`,
and the caller keeps the official client's pool.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import weakref
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# What a reused keep-alive connection raises when the server closed it while it was idle (the usual cause; the
# request then never reached a handler), sent again once on a new connection, as urllib3's pool did. The
# apiserver closes a connection idle for 90 s; over TLS the send or the read then fails with SSLEOFError ("EOF
# occurred in violation of protocol") or SSLZeroReturnError (its close_notify), not only with the plain
# socket's errors. Most such connections are found closed before use (_closed_by_peer); these are the ones
# the server closed in between. Should the server have handled the request after all, sending it twice is
# harmless here: a create finds its name taken (409, which the caller claims), deletes and status patches
# are idempotent.
STALE_CONNECTION_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                           ConnectionAbortedError, ssl.SSLEOFError, ssl.SSLZeroReturnError)


def _closed_by_peer(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle keep-alive connection was closed by the server (urllib3's pool asks the same before it
    reuses one): nothing is owed on it, so a socket readable now holds only the server's FIN or TLS
    close_notify. poll, not select: select refuses a descriptor above 1023."""
    if conn.sock is None:
        return False  # not connected yet: the request connects it
    poller = select.poll()
    try:
        poller.register(conn.sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):  # a socket already closed
        return True


@dataclass(frozen=True)
class Reply:
    """What KubeApi reads of a response (the shape of a preloaded urllib3 response)."""
    status: int
    reason: str
    headers: Any  # http.client.HTTPMessage: .get(name)
    data: bytes


class _Connection(http.client.HTTPConnection):
    """A plain or TLS connection, with the socket options and TLS server name the Configuration asks for."""

    def __init__(self, host: str, port: int, timeout: float | None, tls: ssl.SSLContext | None,
                 server_hostname: str, socket_options: list[tuple[int, int, int]]):
        super().__init__(host, port, timeout=timeout if timeout is not None else socket.getdefaulttimeout())
        self._tls, self._server_hostname, self._socket_options = tls, server_hostname, socket_options

    def connect(self) -> None:
        super().connect()
        for option in self._socket_options:
            self.sock.setsockopt(*option)
        if self._tls is not None:
            self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._server_hostname)


class ThreadConnections:
    """`request` sends on the calling thread's own connection, opened at its first request and kept open."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None, server_hostname: str,
                 socket_options: list[tuple[int, int, int]]):
        self._host, self._port, self._tls = host, port, tls
        self._server_hostname, self._socket_options = server_hostname, socket_options
        self._local = threading.local()
        self._lock = threading.Lock()
        # Every thread's, so that close() reaches them all; held weakly: a thread that ends (an informer's, whose
        # watch restarts) takes its connection with it instead of leaving its socket open here for good.
        self._open: weakref.WeakSet[_Connection] = weakref.WeakSet()

    @classmethod
    def for_configuration(cls, configuration: Any, socket_options: list[tuple[int, int, int]]
                          ) -> ThreadConnections | None:
        """For a kubernetes.client.Configuration (read, not imported: controller.kube is the one module that
        imports the client), with the socket options its pool would use; None when it asks for what only its
        own pool serves."""
        url = urlsplit(configuration.host)
        if url.scheme not in ("http", "https") or not url.hostname or configuration.proxy \
                or configuration.assert_hostname not in (None, False):
            return None
        tls = None
        if url.scheme == "https":
            tls = ssl.create_default_context(cafile=configuration.ssl_ca_cert,
                                             cadata=configuration.ca_cert_data)
            if configuration.cert_file:
                tls.load_cert_chain(configuration.cert_file, configuration.key_file)
            if not configuration.verify_ssl or configuration.assert_hostname is False:
                tls.check_hostname = False
            if not configuration.verify_ssl:
                tls.verify_mode = ssl.CERT_NONE
        return cls(url.hostname, url.port or (443 if tls else 80), tls,
                   configuration.tls_server_name or url.hostname, socket_options)

    def request(self, method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                timeout: float | None = None, **_: Any) -> Reply:
        """Send and read the whole response. `url` is the apiserver's (the Configuration's host + a path).
        Raises OSError or http.client.HTTPException when the connection fails; the connection is then closed,
        and the thread's next request opens a new one."""
        target = url.split("://", 1)[-1]
        path = target[target.find("/"):] if "/" in target else "/"
        conn, reused = self._connection(timeout)
        try:
            return self._send(conn, method, path, body, headers or {})
        except STALE_CONNECTION_ERRORS:
            if not reused:
                raise
        return self._send(self._connection(timeout)[0], method, path, body, headers or {})

    def close(self) -> None:
        with self._lock:
            connections, self._open = list(self._open), weakref.WeakSet()
        for conn in connections:
            conn.close()

    def _connection(self, timeout: float | None) -> tuple[_Connection, bool]:
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is not None and conn.timeout == timeout and not _closed_by_peer(conn):
            return conn, True
        if conn is not None:
            self._drop(conn)
        conn = _Connection(self._host, self._port, timeout, self._tls, self._server_hostname, self._socket_options)
        self._local.conn = conn
        with self._lock:
            self._open.add(conn)
        return conn, False

    def _send(self, conn: _Connection, method: str, path: str, body: bytes | None,
              headers: dict[str, str]) -> Reply:
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            reply = Reply(response.status, response.reason, response.headers, response.read())
        except BaseException:
            self._drop(conn)
            raise
        if response.will_close:  # the server said Connection: close
            self._drop(conn)
        return reply

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._open.discard(conn)
