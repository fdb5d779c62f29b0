"""What the planner's tests share: a fixed clock, observed pods, one planning pass, and readers of its output."""

from __future__ import annotations

from datetime import datetime, timezone

from multinode.api import TrainingJobStatus
from multinode.reconcile import Observed, plan
from multinode.render import RenderSettings
from multinode.testing import observed_mirror, observed_pod, seen_integrations

# The planner's tests name these as they always have.
pod = observed_pod
running_mirror = observed_mirror

NOW = datetime(2026, 11, 20, 12, 0, 0, tzinfo=timezone.utc)
SETTINGS = RenderSettings()
LATEST = {"name": "checkpoint-300", "path": "/checkpoints/llama/checkpoint-300", "step": 300, "bytes": 10,
          "mirroredAt": "2026-11-20T11:00:00Z"}


# What `run` takes of the integrations' observations (multinode.testing.seen_integrations), beside Observed's own.
_INTEGRATIONS = ("gang_api", "pod_groups", "kueue_api", "workload", "flavors", "priority")


def run(job, pods, previous=None, service_exists=True, now=NOW, **observed):
    seen = seen_integrations(**{k: observed.pop(k) for k in _INTEGRATIONS if k in observed})
    return plan(job, Observed(pods=tuple(pods), service_exists=service_exists, integrations=seen, **observed),
                previous=previous, now=now, settings=SETTINGS)


def condition(status: TrainingJobStatus, type_: str):
    return next(c for c in status.conditions if c.type == type_)


def env(pod_manifest: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod_manifest["spec"]["containers"][0]["env"]}


def fail_node_1(job, exit_code=1, **kw):
    running = run(job, [pod(0), pod(1)])
    return run(job, [pod(0), pod(1, "Failed", exit_code=exit_code, reason="Error", **kw)], previous=running.status)
