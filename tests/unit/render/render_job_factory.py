"""Builds the TrainingJob the render tests start from."""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob


def make_job(num_nodes: int = 2, **spec: Any) -> TrainingJob:
    """TrainingJob "llama" in namespace "ml"; keyword arguments are camelCase spec fields."""
    return TrainingJob.model_validate(
        {
            "metadata": {"name": "llama", "namespace": "ml", "uid": "uid-123"},
            "spec": {"numNodes": num_nodes, "image": "registry/train:1.2", **spec},
        }
    )
