"""A git server on loopback for GitOps tests: git's own smart HTTP (`git http-backend`, as a CGI program) over
the repositories under one folder, read-only (tests commit in a work tree and push to the bare repository by
path). Flux's source-controller clones and fetches from it like from any git host.

    with GitServer(root) as server:
        server.url("fleet.git")  # http://127.0.0.1:<port>/fleet.git
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit


def _backend() -> str:
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout.strip()
    return str(Path(exec_path) / "git-http-backend")


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def _cgi(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "GIT_PROJECT_ROOT": str(self.server.root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": url.path,
            "QUERY_STRING": url.query, "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""), "REMOTE_ADDR": self.client_address[0],
            "PATH": "/usr/bin:/bin",
        }
        done = subprocess.run([self.server.backend], input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root, self.backend = root, _backend()


class GitServer:
    def __init__(self, root: Path):
        self.root = root
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GitServer:
        self.root.mkdir(parents=True, exist_ok=True)
        self._server = _Server(self.root)
        self._thread = threading.Thread(target=self._server.serve_forever, name="git-server", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def url(self, repository: str) -> str:
        assert self._server is not None, "the server is not running"
        return f"http://127.0.0.1:{self._server.server_address[1]}/{repository}"


class WorkTree:
    """A bare repository `<root>/<name>` the server serves, and a work tree beside it that commits and pushes
    to it by path."""

    def __init__(self, root: Path, name: str):
        self.bare, self.tree = root / name, root / f"{name}.work"
        root.mkdir(parents=True, exist_ok=True)
        for path in (self.bare, self.tree):
            shutil.rmtree(path, ignore_errors=True)
        self._git(root, "init", "-q", "--bare", "-b", "main", str(self.bare))
        self._git(root, "init", "-q", "-b", "main", str(self.tree))

    @staticmethod
    def _git(cwd: Path, *args: str) -> str:
        env = {"GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@multinode.dev", "GIT_COMMITTER_NAME": "test",
               "GIT_COMMITTER_EMAIL": "test@multinode.dev", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
        return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout

    def write(self, path: str, text: str) -> None:
        target = self.tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def remove(self, path: str) -> None:
        (self.tree / path).unlink()

    def commit(self, message: str) -> str:
        """Commit everything in the work tree and push it; returns the commit's hash."""
        self._git(self.tree, "add", "-A")
        self._git(self.tree, "commit", "-q", "-m", message)
        self._git(self.tree, "push", "-q", str(self.bare), "main")
        return self._git(self.tree, "rev-parse", "HEAD").strip()
