"""The request threads' keep-alive connections (controller/connections.py), against a local HTTP/1.1 server:
one connection per thread, kept; a connection the server dropped while idle replaced; TLS with a client
certificate, as a kubeconfig with client-certificate-data asks for."""

from __future__ import annotations

import gc
import http.server
import select
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from multinode.controller.connections import ThreadConnections, _closed_by_peer
from multinode.controller.kube import KubeApi


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, drop_after_each: bool = False, tls: ssl.SSLContext | None = None):
        self.seen: list[tuple[int, str, str, dict[str, str]]] = []  # (connection, method, path, headers)
        self.drop_after_each = drop_after_each
        self.connections = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)

    @property
    def url(self) -> str:
        scheme = "https" if isinstance(self.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1
            self.connection_number = self.server.connections

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append((self.connection_number, self.command, self.path, dict(self.headers)))
        data = b'{"echo": %d}' % len(body)
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        # Closed without a Connection: close header, as a server whose idle timeout passed does.
        self.close_connection = self.server.drop_after_each

    do_GET = do_POST = _answer

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator:
    servers: list[Server] = []

    def start(**kwargs) -> Server:
        server = Server(**kwargs)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def configuration(url: str, **settings) -> SimpleNamespace:
    """The fields of a kubernetes.client.Configuration that connections.py reads, as the client defaults them."""
    return SimpleNamespace(**{"host": url, "proxy": None, "assert_hostname": None, "ssl_ca_cert": None,
                              "ca_cert_data": None, "cert_file": None, "key_file": None, "verify_ssl": True,
                              "tls_server_name": None, **settings})


def connections_to(url: str, **settings) -> ThreadConnections:
    connections = ThreadConnections.for_configuration(configuration(url, **settings), [])
    assert connections is not None
    return connections


def posts_each_handled_once_on_a_connection_of_its_own(connections: ThreadConnections, server: Server) -> None:
    """Three POSTs to a server that closes each connection after its answer: each is answered, handled once,
    on a connection of its own (the closed one is not used twice)."""
    for _ in range(3):
        assert connections.request("POST", server.url + "/p", body=b"{}").status == 201
    assert [c for c, *_ in server.seen] == [1, 2, 3]


def test_a_thread_keeps_its_connection_and_threads_do_not_share_one(serve) -> None:
    server = serve()
    connections = connections_to(server.url)
    replies = [connections.request("POST", server.url + "/api/v1/pods?x=1", body=b"{}", headers={"A": "b"})
               for _ in range(3)]
    assert [r.status for r in replies] == [201, 201, 201] and replies[0].data == b'{"echo": 2}'
    other = threading.Thread(target=lambda: connections.request("GET", server.url + "/version"))
    other.start()
    other.join()
    assert [(c, m, p) for c, m, p, _ in server.seen] == [
        (1, "POST", "/api/v1/pods?x=1"), (1, "POST", "/api/v1/pods?x=1"), (1, "POST", "/api/v1/pods?x=1"),
        (2, "GET", "/version")]
    assert server.seen[0][3]["A"] == "b"
    connections.close()


def test_a_connection_the_server_dropped_while_idle_is_replaced_and_the_request_sent_again(serve) -> None:
    server = serve(drop_after_each=True)
    connections = connections_to(server.url)
    posts_each_handled_once_on_a_connection_of_its_own(connections, server)
    connections.close()


def test_a_new_connection_that_fails_is_an_error_not_retried(serve) -> None:
    server = serve()
    url = server.url
    server.shutdown()
    server.server_close()
    with pytest.raises(OSError):
        connections_to(url).request("GET", url + "/version")


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate it signed, as a cluster's are."""
    tmp_path = tmp_path_factory.mktemp("certs")

    def signed(name: str, cn: str, ext: str) -> None:
        (tmp_path / f"{name}.ext").write_text(ext)
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", tmp_path / f"{name}.key",
                "-out", tmp_path / f"{name}.csr")
        openssl("x509", "-req", "-in", tmp_path / f"{name}.csr", "-CA", tmp_path / "ca.crt", "-CAkey",
                tmp_path / "ca.key", "-CAcreateserial", "-days", "1", "-extfile", tmp_path / f"{name}.ext",
                "-out", tmp_path / f"{name}.crt")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
            "-keyout", tmp_path / "ca.key", "-out", tmp_path / "ca.crt")
    signed("server", "apiserver", "subjectAltName=IP:127.0.0.1\n")
    signed("user", "operator", "extendedKeyUsage=clientAuth\n")
    return tmp_path


def tls_server(serve, certificates: Path, **kwargs) -> Server:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certificates / "server.crt", certificates / "server.key")
    tls.load_verify_locations(certificates / "ca.crt")
    tls.verify_mode = ssl.CERT_REQUIRED  # no client certificate, no answer
    return serve(tls=tls, **kwargs)


def trusting(server: Server, certificates: Path) -> ThreadConnections:
    return connections_to(server.url, ssl_ca_cert=str(certificates / "ca.crt"),
                          cert_file=str(certificates / "user.crt"), key_file=str(certificates / "user.key"))


def test_tls_with_the_configurations_ca_and_client_certificate(serve, certificates: Path) -> None:
    server = tls_server(serve, certificates)
    trusted = trusting(server, certificates)
    assert trusted.request("GET", server.url + "/version").status == 200
    trusted.close()
    # Not trusting the server's CA is refused.
    with pytest.raises(ssl.SSLError):
        connections_to(server.url, cert_file=str(certificates / "user.crt"),
                       key_file=str(certificates / "user.key")).request("GET", server.url + "/version")


def test_a_tls_connection_the_server_closed_while_idle_is_not_used_again(serve, certificates: Path) -> None:
    """The apiserver closes a connection idle for 90 s: the next request goes out on a new one, found closed
    before it is used, and is handled once."""
    server = tls_server(serve, certificates, drop_after_each=True)
    connections = trusting(server, certificates)
    posts_each_handled_once_on_a_connection_of_its_own(connections, server)
    # What found each closed: the connection, readable once the server's close arrives (it closes after it
    # answered, so this waits for that), where one the server keeps stays unreadable.
    closed = connections._local.conn
    arrived = select.poll()
    arrived.register(closed.sock, select.POLLIN)
    assert arrived.poll(10_000), "the server's close did not arrive"
    assert _closed_by_peer(closed)
    keeping = tls_server(serve, certificates)
    kept_open = trusting(keeping, certificates)
    assert kept_open.request("GET", keeping.url + "/version").status == 200
    assert not _closed_by_peer(kept_open._local.conn)
    connections.close()
    kept_open.close()


def test_a_tls_connection_closed_after_the_check_is_sent_again_on_a_new_one(serve, certificates: Path,
                                                                            monkeypatch) -> None:
    """The server may close the connection between the check and the send: what TLS raises then (the
    SSLEOFError a full make test once met) sends the request again on a new connection, not to the caller."""
    server = tls_server(serve, certificates, drop_after_each=True)
    connections = trusting(server, certificates)
    monkeypatch.setattr("multinode.controller.connections._closed_by_peer", lambda conn: False)
    posts_each_handled_once_on_a_connection_of_its_own(connections, server)
    connections.close()


def test_a_connection_of_a_thread_that_ended_is_not_kept_open(serve) -> None:
    """An informer's thread ends when its watch restarts: its connection (and socket) goes with it."""
    server = serve()
    connections = connections_to(server.url)
    threads = [threading.Thread(target=lambda: connections.request("GET", server.url + "/version"))
               for _ in range(3)]
    for thread in threads:
        thread.start()
        thread.join()
    del thread, threads
    gc.collect()
    assert len(connections._open) == 0
    connections.close()


def test_a_proxy_or_a_hostname_to_assert_is_left_to_the_official_clients_pool() -> None:
    assert ThreadConnections.for_configuration(configuration("https://apiserver:6443"), []) is not None
    for settings in ({"proxy": "http://proxy:3128"}, {"assert_hostname": "other"}):
        assert ThreadConnections.for_configuration(configuration("https://apiserver:6443", **settings), []) is None


def test_credentials_are_asked_of_the_configuration_once_per_period_not_per_request() -> None:
    asked: list[int] = []

    def auth_settings() -> dict:
        asked.append(1)
        return {"BearerToken": {"in": "header", "key": "authorization", "value": f"Bearer t{len(asked)}"}}
    now = [1000.0]
    api_client = SimpleNamespace(configuration=SimpleNamespace(host="https://apiserver", auth_settings=auth_settings),
                                 rest_client=SimpleNamespace(pool_manager=None))
    kube = KubeApi(api_client, 1)  # type: ignore[arg-type]  # a fake client
    kube._clock = lambda: now[0]
    assert kube._credentials() == {"authorization": "Bearer t1"}
    now[0] += 9.0
    assert kube._credentials() == {"authorization": "Bearer t1"} and len(asked) == 1
    now[0] += 1.0  # CREDENTIALS_SECONDS after the first ask: a rotated token is read
    assert kube._credentials() == {"authorization": "Bearer t2"}
