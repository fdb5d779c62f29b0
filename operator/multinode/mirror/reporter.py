"""Reads and patches one TrainingJob's status subresource, and nothing else.

The mirror's Role allows exactly `get` and `patch` on `trainingjobs/status` for its own job's name
(render/mirror.py), so this is all it can do, and all it tries to do.
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client, config

from multinode.api import GROUP, PLURAL, VERSION


class JobGone(Exception):
    pass


def load_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


class StatusReporter:
    def __init__(self, api_client: client.ApiClient, namespace: str, job: str):
        self._custom = client.CustomObjectsApi(api_client)
        self.namespace, self.job = namespace, job

    def read_status(self) -> dict[str, Any]:
        try:
            obj = self._custom.get_namespaced_custom_object_status(GROUP, VERSION, self.namespace, PLURAL, self.job)
        except client.ApiException as e:
            if e.status == 404:
                raise JobGone(f"{self.namespace}/{self.job}") from e
            raise
        return cast(dict[str, Any], obj).get("status") or {}  # a dict, which the client types as object

    def report(self, checkpoints: dict[str, Any]) -> None:
        """Merge-patch status.checkpoints (a key set to None is removed)."""
        try:
            self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, self.job, {"status": {"checkpoints": checkpoints}})
        except client.ApiException as e:
            if e.status == 404:
                raise JobGone(f"{self.namespace}/{self.job}") from e
            raise
