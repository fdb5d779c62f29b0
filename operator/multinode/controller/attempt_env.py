"""The attempt's shared-env ConfigMap (render/attempt_env.py), created once before the attempt's pods."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from multinode.controller.kube import KubeApi
from multinode.controller.ownership import create_or_claim


class AttemptEnvs:
    """Remembers, per job, the ConfigMap it made last, so a reconcile that creates more pods of the same
    attempt costs no request. After an operator restart the first create gets 409, which counts as
    created once a read of the ConfigMap shows it is the job's (its name is predictable: a co-tenant could
    have made it first, with an environment of their choosing). Nothing watches ConfigMaps: the operator
    reads one only then."""

    def __init__(self, kube: KubeApi):
        self.kube = kube
        self._made: dict[Hashable, str] = {}

    async def ensure(self, namespace: str, key: Hashable, config_map: dict[str, Any], stale: str | None,
                     job_uid: str) -> None:
        name = config_map["metadata"]["name"]
        if self._made.get(key) == name:
            return
        await create_or_claim(self.kube, namespace, config_map, job_uid)
        self._made[key] = name
        if stale is not None:
            # The previous attempt's pods are gone or going; its ConfigMap would otherwise stay until the
            # job is deleted (it is owned by the job, so that removes any one missed here).
            await self.kube.delete_config_map(namespace, stale)

    def forget(self, key: Hashable) -> None:
        self._made.pop(key, None)
