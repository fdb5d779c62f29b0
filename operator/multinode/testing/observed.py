"""Builders of what the planner observes: pods and mirrors as the informers hand them over."""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob
from multinode.reconcile import ObservedMirror, ObservedPod
from multinode.testing.jobs import stored_job


def observed_pod(index: int, phase: str = "Running", *, attempt: int = 0, node: str | None = "gpu-node-0",
                 job_name: str = "llama", **fields: Any) -> ObservedPod:
    """Node pod `index` of `attempt` of job `job_name`, ready when Running unless `ready` says otherwise."""
    fields.setdefault("ready", phase == "Running")
    return ObservedPod(name=f"{job_name}-{index}-a{attempt}", job_name=job_name, index=index, attempt=attempt,
                       phase=phase, node=node, **fields)


def observed_spare(serial: int, node: str | None = "gpu-node-9", *, rank: int | None = None,
                   joined_in: int | None = None, phase: str = "Pending", job_name: str = "llama",
                   **fields: Any) -> ObservedPod:
    """Hot spare `serial` of job `job_name`: waiting in its preflight (warm) unless it took node `rank`'s rank
    in attempt `joined_in`."""
    fields.setdefault("in_preflight", rank is None)
    fields.setdefault("ready", phase == "Running")
    return ObservedPod(name=f"{job_name}-s{serial}", job_name=job_name, index=-1 if rank is None else rank,
                       attempt=-1 if joined_in is None else joined_in, phase=phase, node=node, spare=serial,
                       **fields)


def observed_mirror(phase: str = "Running", *, job_name: str = "llama") -> ObservedMirror:
    return ObservedMirror(name=f"{job_name}-mirror", job_name=job_name, phase=phase)


def checkpointed_job(checkpoints: dict[str, Any] | None = None, **checkpointing: Any) -> TrainingJob:
    """A 2-node checkpointed job; `checkpoints` is what its mirror has reported in status."""
    base = stored_job(2, cache={"claimName": "cache"}, checkpointing={"claimName": "ckpt", **checkpointing})
    if checkpoints is None:
        return base
    return TrainingJob.model_validate({**base.model_dump(by_alias=True, exclude_none=True),
                                       "status": {"checkpoints": checkpoints}})
