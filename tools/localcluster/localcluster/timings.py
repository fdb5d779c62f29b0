"""Node-lifecycle timings of the control plane: how fast it gives up on a node and evicts its pods."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeTimings:
    """How fast the control plane gives up on a node that stops heartbeating, and evicts its pods."""

    node_monitor_period: str
    node_monitor_grace_period: str
    # DefaultTolerationSeconds: what every pod without its own not-ready/unreachable toleration gets.
    not_ready_toleration_seconds: int
    # kwok renews its nodes' leases at a quarter of this, as a kubelet does with its 40 s default.
    node_lease_duration_seconds: int


# "short" keeps failure tests from waiting minutes; "stock" is what a user's cluster runs (the
# kube-controller-manager and apiserver defaults), for tests and benchmarks of node loss as users see it.
TIMINGS = {
    "short": NodeTimings("1s", "20s", 5, 20),
    "stock": NodeTimings("5s", "40s", 300, 40),
}
