"""Operator-wide knobs the renderer needs: operator configuration, not part of any job."""

from __future__ import annotations

from dataclasses import dataclass

from multinode import __version__
from multinode.api.constants import DEFAULT_PREFLIGHT_TIMEOUT_SECONDS

# Where releases push the operator image, tagged with the package version (the chart's image.repository and
# appVersion say the same: tests/unit/packaging/test_version.py).
OPERATOR_IMAGE_REPOSITORY = "ghcr.io/multinode/operator"
DEFAULT_OPERATOR_IMAGE = f"{OPERATOR_IMAGE_REPOSITORY}:{__version__}"
# The ClusterRole each checkpointed job's mirror is bound to (get and patch of trainingjobs/status): the chart
# ships it as <fullname>-mirror and names it in MULTINODE_MIRROR_CLUSTER_ROLE; this is its name in a release
# called multinode-operator, as docs/install.md installs it.
DEFAULT_MIRROR_CLUSTER_ROLE = "multinode-operator-mirror"


@dataclass(frozen=True)
class RenderSettings:
    """Settings that shape every rendered pod.

    operator_image runs the `multinode preflight` init container, which waits until
    every peer's DNS name resolves before the trainer starts (Kubernetes DNS can lag
    tens of seconds behind pod creation, and torch's TCPStore treats a failed lookup
    as fatal), and each checkpointed job's `multinode mirror` pod.
    """

    operator_image: str = DEFAULT_OPERATOR_IMAGE
    preflight_timeout_seconds: int = DEFAULT_PREFLIGHT_TIMEOUT_SECONDS
    mirror_cluster_role: str = DEFAULT_MIRROR_CLUSTER_ROLE

    def __post_init__(self) -> None:
        if not self.operator_image:
            raise ValueError("operator_image must not be empty")
        if not self.mirror_cluster_role:
            raise ValueError("mirror_cluster_role must not be empty")
        if self.preflight_timeout_seconds <= 0:
            raise ValueError("preflight_timeout_seconds must be positive")
