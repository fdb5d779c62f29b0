"""What the planner's tests share: a fixed clock, observed pods, one planning pass, and readers of its output."""

from __future__ import annotations

from datetime import datetime, timezone

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.reconcile import Observed, ObservedMirror, ObservedPod, plan
from multinode.render import RenderSettings
from localcluster.harness.trainingjobs import stored_job

NOW = datetime(2026, 11, 20, 12, 0, 0, tzinfo=timezone.utc)
SETTINGS = RenderSettings()
LATEST = {"name": "checkpoint-300", "path": "/checkpoints/llama/checkpoint-300", "step": 300, "bytes": 10,
          "mirroredAt": "2026-11-20T11:00:00Z"}


def pod(index: int, phase: str = "Running", *, attempt: int = 0, node: str | None = "gpu-node-0", **kw) -> ObservedPod:
    kw.setdefault("ready", phase == "Running")
    return ObservedPod(name=f"llama-{index}-a{attempt}", job_name="llama", index=index, attempt=attempt,
                       phase=phase, node=node, **kw)


def run(job, pods, previous=None, service_exists=True, now=NOW, **observed):
    return plan(job, Observed(pods=tuple(pods), service_exists=service_exists, **observed),
                previous=previous, now=now, settings=SETTINGS)


def condition(status: TrainingJobStatus, type_: str):
    return next(c for c in status.conditions if c.type == type_)


def env(pod_manifest: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod_manifest["spec"]["containers"][0]["env"]}


def fail_node_1(job, exit_code=1, **kw):
    running = run(job, [pod(0), pod(1)])
    return run(job, [pod(0), pod(1, "Failed", exit_code=exit_code, reason="Error", **kw)], previous=running.status)


def checkpointed_job(checkpoints: dict | None = None, **checkpointing) -> TrainingJob:
    """A 2-node checkpointed job; `checkpoints` is what its mirror has reported in status."""
    base = stored_job(2, cache={"claimName": "cache"}, checkpointing={"claimName": "ckpt", **checkpointing})
    if checkpoints is None:
        return base
    return TrainingJob.model_validate({**base.model_dump(by_alias=True, exclude_none=True),
                                       "status": {"checkpoints": checkpoints}})


def running_mirror(phase: str = "Running") -> ObservedMirror:
    return ObservedMirror(name="llama-mirror", job_name="llama", phase=phase)
