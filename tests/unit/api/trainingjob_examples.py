"""The smallest TrainingJob the apiserver stores, shared by the api tests (the fullest is
`multinode.testing.full_job`)."""

from __future__ import annotations

from typing import Any


def minimal_trainingjob() -> dict[str, Any]:
    return {
        "apiVersion": "multinode.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "tiny", "namespace": "default", "uid": "u-1"},
        "spec": {"numNodes": 1, "image": "busybox"},
    }
