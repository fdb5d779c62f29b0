"""Reads and patches one TrainingJob's status subresource, and nothing else.

The mirror's Role allows exactly `get` and `patch` on `trainingjobs/status` for its own job's name
(render/mirror_pod.py), so this is all it can do, and all it tries to do.

No call may hold a pass up for long: each has a connect and a read timeout, and the connections use TCP
keepalive, so an apiserver that vanished behind a dead connection is noticed by the kernel instead of
never. A call that fails raises; the loop goes on copying (and, not knowing its pins, prunes nothing).
"""

from __future__ import annotations

import socket
from typing import Any, cast

from kubernetes import client, config

from multinode.api import GROUP, PLURAL, VERSION

# (connect, read) seconds of each call; urllib3 retries an idempotent read a few times on top.
REQUEST_TIMEOUT = (10.0, 30.0)
# TCP keepalive as client-go sets it: probe an idle connection after 30 s, every 15 s, drop it after 9.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES = 30, 15, 9


class JobGone(Exception):
    pass


def keepalive_socket_options() -> list[tuple[int, int, int]]:
    options = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1), (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES)):
        if hasattr(socket, name):   # Linux has all three
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def keepalive_client(configuration: client.Configuration) -> client.ApiClient:
    """A client whose connections use TCP keepalive."""
    configuration.socket_options = keepalive_socket_options()
    return client.ApiClient(configuration)


def load_client() -> client.ApiClient:
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    return keepalive_client(configuration)


class StatusReporter:
    def __init__(self, api_client: client.ApiClient, namespace: str, job: str,
                 timeout: tuple[float, float] = REQUEST_TIMEOUT):
        self._custom = client.CustomObjectsApi(api_client)
        self.namespace, self.job, self.timeout = namespace, job, timeout

    def read_status(self) -> dict[str, Any]:
        try:
            obj = self._custom.get_namespaced_custom_object_status(GROUP, VERSION, self.namespace, PLURAL, self.job,
                                                                   _request_timeout=self.timeout)
        except client.ApiException as e:
            if e.status == 404:
                raise JobGone(f"{self.namespace}/{self.job}") from e
            raise
        return cast(dict[str, Any], obj).get("status") or {}  # a dict, which the client types as object

    def report(self, checkpoints: dict[str, Any]) -> None:
        """Merge-patch status.checkpoints (a key set to None is removed)."""
        try:
            self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, self.job, {"status": {"checkpoints": checkpoints}},
                _request_timeout=self.timeout)
        except client.ApiException as e:
            if e.status == 404:
                raise JobGone(f"{self.namespace}/{self.job}") from e
            raise
