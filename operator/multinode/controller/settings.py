"""Operator-wide settings, from the command line or MULTINODE_* environment variables (the chart sets those)."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

from multinode.api.constants import DEFAULT_PREFLIGHT_TIMEOUT_SECONDS
from multinode.reconcile.first_status import FIRST_STATUS_WAIT_SECONDS
from multinode.reconcile.leadership import LeaseTimings
from multinode.render import DEFAULT_MIRROR_CLUSTER_ROLE, DEFAULT_OPERATOR_IMAGE, RenderSettings

# A minute: a LIST of every TrainingJob is cheap next to the watches, and a lost event costs a job at most
# two minutes of waiting instead of for ever.
DEFAULT_RESYNC_SECONDS = 60.0

# API calls in flight at once. More is not faster on a busy control plane: creates that outrun the other
# controllers' pod watches make kube-apiserver close those watches (each controller then lists every pod
# again) and take the CPU the scheduler and the kubelets need to start the pods. Side by side on the 2-core
# test cluster, a 1000-node job was Running in 24.0 s at 16 against 26.4 s at 32 (its pods created in 9.1 s
# against 8.8 s); 8 was as fast to Running but took 12.2 s to create them (docs/benchmarks.md, "Throughput").
DEFAULT_API_CONCURRENCY = 16


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


@dataclass(frozen=True)
class OperatorSettings:
    # Empty: watch every namespace.
    namespaces: tuple[str, ...] = ()
    # What shapes the rendered pods (the operator image, the preflight timeout) is the renderer's own
    # settings class, held here, not mirrored field by field.
    render: RenderSettings = field(default_factory=RenderSettings)
    # Jobs reconciled at once, and API calls in flight at once (pod creation fans out to this many).
    workers: int = 8
    api_concurrency: int = DEFAULT_API_CONCURRENCY
    # A failing reconcile is retried with exponential backoff up to this many seconds.
    max_retry_delay_seconds: float = 60.0
    # Each API call of the operator's client gives up after this long (the reconcile is then retried):
    # without a timeout, one call to a hung apiserver or over a dead connection stalls its job forever.
    api_timeout_seconds: float = 30.0
    # Every TrainingJob is listed again this often, and one the operator never reconciled at its generation
    # is reconciled (resync.py): the safety net under the watch events. A job whose event was lost waits
    # at most two periods.
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    # A new job's first status waits this long at most for its pods to be seen (reconcile/first_status.py);
    # 0 writes it at once.
    first_status_wait_seconds: float = FIRST_STATUS_WAIT_SECONDS

    def __post_init__(self) -> None:
        if self.workers < 1 or self.api_concurrency < 1:
            raise ValueError("workers and api_concurrency must be at least 1")
        if self.api_timeout_seconds <= 0:
            raise ValueError("api_timeout_seconds must be positive")
        if self.resync_seconds <= 0:
            raise ValueError("resync_seconds must be positive")
        if self.first_status_wait_seconds < 0:
            raise ValueError("first_status_wait_seconds must not be negative")

    @classmethod
    def from_env(cls, *, operator_image: str | None = None, **overrides: Any) -> OperatorSettings:
        """The chart's MULTINODE_* variables; keyword arguments that are not None (the command line) win."""
        render = RenderSettings(
            operator_image=operator_image or os.environ.get("MULTINODE_OPERATOR_IMAGE", DEFAULT_OPERATOR_IMAGE),
            preflight_timeout_seconds=_env_int("MULTINODE_PREFLIGHT_TIMEOUT_SECONDS",
                                               DEFAULT_PREFLIGHT_TIMEOUT_SECONDS),
            mirror_cluster_role=os.environ.get("MULTINODE_MIRROR_CLUSTER_ROLE") or DEFAULT_MIRROR_CLUSTER_ROLE)
        namespaces = tuple(n for n in os.environ.get("MULTINODE_NAMESPACES", "").split(",") if n)
        values: dict[str, Any] = {
            "namespaces": namespaces,
            "render": render,
            "workers": _env_int("MULTINODE_WORKERS", 8),
            "api_concurrency": _env_int("MULTINODE_API_CONCURRENCY", DEFAULT_API_CONCURRENCY),
            "api_timeout_seconds": float(os.environ.get("MULTINODE_API_TIMEOUT_SECONDS") or 30),
            "resync_seconds": float(os.environ.get("MULTINODE_RESYNC_SECONDS") or DEFAULT_RESYNC_SECONDS),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


# Where a pod finds its own namespace when the chart's POD_NAMESPACE is not set.
SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _own_namespace() -> str:
    """The operator's namespace: POD_NAMESPACE (the chart sets it), the service account's, else "default"."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE_FILE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def _env_flag(name: str) -> bool | None:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    return value in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class LeaderElection:
    """Who this replica is, which Lease the replicas compete for, and client-go's timings
    (controller/leader.py). Identity: the pod name (the hostname) plus a random suffix, as
    kube-controller-manager does, so a restarted container never mistakes its predecessor's Lease for its own."""

    namespace: str
    identity: str
    name: str = "multinode-operator"
    timings: LeaseTimings = field(default_factory=LeaseTimings)

    @classmethod
    def from_env(cls, enabled: bool | None = None, **overrides: Any) -> LeaderElection | None:
        """None when leader election is off (MULTINODE_LEADER_ELECTION, or `enabled` from the command line,
        which wins). Keyword arguments that are not None (the command line) win over the variables."""
        if not (enabled if enabled is not None else _env_flag("MULTINODE_LEADER_ELECTION")):
            return None
        given = {k: v for k, v in overrides.items() if v is not None}
        default = LeaseTimings()
        timings = LeaseTimings(
            lease_duration_seconds=given.pop("lease_duration_seconds", None)
            or _env_float("MULTINODE_LEASE_DURATION_SECONDS", default.lease_duration_seconds),
            renew_deadline_seconds=given.pop("renew_deadline_seconds", None)
            or _env_float("MULTINODE_RENEW_DEADLINE_SECONDS", default.renew_deadline_seconds),
            retry_period_seconds=given.pop("retry_period_seconds", None)
            or _env_float("MULTINODE_RETRY_PERIOD_SECONDS", default.retry_period_seconds))
        pod = os.environ.get("POD_NAME") or socket.gethostname()
        values: dict[str, Any] = {
            "namespace": os.environ.get("MULTINODE_LEASE_NAMESPACE") or _own_namespace(),
            "identity": os.environ.get("MULTINODE_LEADER_IDENTITY") or f"{pod}_{uuid.uuid4().hex[:10]}",
            "name": os.environ.get("MULTINODE_LEASE_NAME") or "multinode-operator",
            "timings": timings,
        }
        values.update(given)
        return cls(**values)


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default
