"""The mirror's Kubernetes calls: each has a timeout, and its connections use TCP keepalive, so an apiserver
that stops answering never holds a pass up for ever."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from multinode.mirror.reporter import KEEPALIVE_IDLE, StatusReporter, keepalive_client


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and never answers: an apiserver behind a dead route, or wedged."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for conn in accepted:
        conn.close()
    listener.close()


class JobStatus(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # the connection stays open, as the apiserver's does

    def do_GET(self) -> None:
        body = json.dumps({"metadata": {"name": "llama"}, "status": {"phase": "Running"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def reporter_for(port: int, timeout: tuple[float, float]) -> StatusReporter:
    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    return StatusReporter(keepalive_client(configuration), "ml", "llama", timeout=timeout)


def test_a_status_read_the_apiserver_never_answers_times_out(silent_server: int) -> None:
    reporter = reporter_for(silent_server, timeout=(2.0, 0.5))
    started = time.monotonic()

    with pytest.raises(Exception) as raised:   # urllib3's ReadTimeoutError / MaxRetryError
        reporter.read_status()

    assert "timed out" in str(raised.value).lower() or "timeout" in type(raised.value).__name__.lower()
    assert time.monotonic() - started < 10   # a few retries of 0.5 s, not for ever


def test_the_connections_use_tcp_keepalive() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), JobStatus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        reporter = reporter_for(server.server_address[1], timeout=(2.0, 5.0))
        assert reporter.read_status() == {"phase": "Running"}
        pool = reporter._custom.api_client.rest_client.pool_manager.connection_from_url(
            f"http://127.0.0.1:{server.server_address[1]}")
        conn = pool.pool.get(block=False)   # the idle connection the read left in the pool
        assert conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE
    finally:
        server.shutdown()
        server.server_close()
