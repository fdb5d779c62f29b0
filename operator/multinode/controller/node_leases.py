"""The kubelets' Leases, for jobs with hot spares and in-place restarts (reconcile/lease_loss.py): read from the
apiserver's watch cache at most every REFRESH_SECONDS, shared by every job, and only while such a job asks. Not watched:
every kubelet writes its Lease every 10 s, a stream of events the operator has no use for otherwise.

Without the right to list them (the chart grants it; a hand-made Role may not), the check is off: spares
still take lost nodes' ranks, once the nodes turn NotReady, and a trainer restarted in place is not held.
That is logged once, and asked again every RETRY_SECONDS.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from multinode.controller.kube import KubeApi
from multinode.controller.kube_calls import ApiError
from multinode.reconcile.lease_loss import NodeLease, observe_lease

log = logging.getLogger("multinode.controller")

REFRESH_SECONDS = 2.0
RETRY_SECONDS = 300.0
HTTP_FORBIDDEN = 403


class NodeLeases:
    def __init__(self, kube: KubeApi, clock: Callable[[], float] = time.monotonic):
        self.kube, self.clock = kube, clock
        self.leases: dict[str, NodeLease] = {}
        self.read_at: float | None = None
        self.forbidden_until: float | None = None

    async def current(self) -> Mapping[str, NodeLease]:
        """Every node's lease, by node name, at most REFRESH_SECONDS old ({} when they cannot be read)."""
        now = self.clock()
        if self.forbidden_until is not None and now < self.forbidden_until:
            return {}
        if self.read_at is not None and now - self.read_at < REFRESH_SECONDS:
            return self.leases
        try:
            items = await self.kube.node_leases()
        except ApiError as e:
            if e.status != HTTP_FORBIDDEN:
                log.warning("node leases not read (%s): spares wait for nodes to turn NotReady", e.message)
                return {}
            if self.forbidden_until is None:
                log.warning("no right to list Leases in kube-node-lease: a lost node's rank goes to a spare only "
                            "once the node turns NotReady (%s)", e.message)
            self.forbidden_until = now + RETRY_SECONDS
            return {}
        self.forbidden_until = None
        self.leases = dict(observe_lease(lease) for lease in items)
        self.read_at = now
        return self.leases
