"""Whether the mirror still moves, and the endpoint that says so: `/healthz` beside `/metrics`.

A mirror can stall without dying: a read of a hung network filesystem, an API call that never returns.
Nothing reports it (its last status stays as it was), so the kubelet's liveness probe asks `/healthz`,
which answers 503 once the loop is overdue: no pass ended and no progress was made within `stuck_after`
seconds past the time it was due (the interval between passes, when it rests). Progress is what a long
pass makes on its way: a checkpoint scanned, a file staged (Mirror's `progress`), so copying a large
checkpoint never looks stuck. The times are the mirror's monotonic clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

from multinode.api.constants import MIRROR_HEALTH_PATH as HEALTH_PATH
from multinode.api.constants import MIRROR_STUCK_AFTER_SECONDS

DEFAULT_STUCK_AFTER_SECONDS = float(MIRROR_STUCK_AFTER_SECONDS)


class Liveness:
    def __init__(self, stuck_after: float = DEFAULT_STUCK_AFTER_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stuck_after, self.clock = stuck_after, clock
        self._lock = threading.Lock()   # the copy threads report progress too
        self._due = clock() + stuck_after
        self._last = clock()

    def progressed(self) -> None:
        """The loop moved (a pass ended, a file was staged, an API call answered)."""
        now = self.clock()
        with self._lock:
            self._last = now
            self._due = max(self._due, now + self.stuck_after)

    def resting(self, seconds: float) -> None:
        """The loop sleeps `seconds` before its next pass: it is due only after that."""
        now = self.clock()
        with self._lock:
            self._last = now
            self._due = now + seconds + self.stuck_after

    def check(self) -> tuple[bool, str]:
        now = self.clock()
        with self._lock:
            due, last = self._due, self._last
        if now <= due:
            return True, f"last progress {now - last:.0f}s ago"
        return False, f"stuck: no progress for {now - last:.0f}s (due {now - due:.0f}s ago)"


def serve(port: int, address: str, registry: CollectorRegistry, liveness: Liveness) -> ThreadingHTTPServer:
    """Serve the registry's metrics on every path but HEALTH_PATH, and the liveness check on that one, from a
    daemon thread. Returns the server (its `server_address` has the port, when 0 was asked for)."""
    metrics = MetricsHandler.factory(registry)

    class Handler(metrics):  # type: ignore[misc, valid-type]
        def do_GET(self) -> None:
            if self.path.split("?")[0] != HEALTH_PATH:
                super().do_GET()
                return
            healthy, words = liveness.check()
            body = (words + "\n").encode()
            self.send_response(200 if healthy else 503)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass   # a probe every few seconds is not worth a log line

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="mirror-http", daemon=True).start()
    return server
