"""Startup: why an attempt's pods are scheduled but not all running, and the startup timeout.

spec.startupTimeoutSeconds counts from the attempt's first pod creation; when it passes before every
pod runs, the attempt fails with StartupTimeout and the reason it was stuck (the failure policy then
decides between a restart and failing the job).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.timestamps import parse_time
from multinode.reconcile.failures import Failure
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.outcome import Plan, Verdict

# Waiting reasons (Kubernetes' words) a user must act on, in the words of the condition reason we report.
# Keyed by str | None: a pod's waiting reason may be absent, and then it is not blocking.
BLOCKING_WAITS: dict[str | None, Reason] = {
    "ErrImagePull": Reason.IMAGE_PULL_FAILING, "ImagePullBackOff": Reason.IMAGE_PULL_FAILING,
    "InvalidImageName": Reason.IMAGE_PULL_FAILING, "CrashLoopBackOff": Reason.CRASH_LOOPING,
    "CreateContainerConfigError": Reason.CONTAINER_CONFIG_ERROR,
    "RunContainerError": Reason.CONTAINER_CONFIG_ERROR,
}


def why_starting(pods: list[ObservedPod], running: list[ObservedPod], num_nodes: int) -> Verdict:
    """Every pod is scheduled and some are not running yet: what they wait for, most actionable first."""
    stuck = [p for p in pods if p.waiting_reason in BLOCKING_WAITS]
    if stuck:
        p = stuck[0]
        words = f": {p.waiting_message}" if p.waiting_message else ""
        return Verdict(Phase.STARTING, BLOCKING_WAITS[p.waiting_reason],
                       f"{len(stuck)}/{num_nodes} pods cannot start; {p.name}: {p.waiting_reason}{words}")
    in_preflight = [p for p in pods if p.in_preflight]
    if in_preflight:
        return Verdict(Phase.STARTING, Reason.WAITING_FOR_PEER_DNS,
                       f"{len(in_preflight)}/{num_nodes} pods wait in preflight for peers' DNS names "
                       f"(first: {in_preflight[0].name}); "
                       f"`kubectl logs {in_preflight[0].name} -c preflight` says which")
    return Verdict(Phase.STARTING, Reason.PODS_STARTING,
                   f"{len(running)}/{num_nodes} pods running; the rest are scheduled and starting")


def startup_timeout(job: TrainingJob, status: TrainingJobStatus, current: dict[int, ObservedPod], now: datetime,
                    result: Plan, *, why_not_running: Callable[[], str]) -> Failure | None:
    """StartupTimeout once the timeout passed with pods not all running; until then, come back when it would."""
    timeout = job.spec.startup_timeout_seconds
    started = (PodPhase.RUNNING, PodPhase.SUCCEEDED)
    all_running = len(current) == job.spec.num_nodes and all(p.phase in started for p in current.values())
    if not (timeout and status.attempt_start_time and not all_running):
        return None
    waited = (now - parse_time(status.attempt_start_time, now)).total_seconds()
    if waited >= timeout:
        return Failure(Reason.STARTUP_TIMEOUT, f"pods not all running {timeout}s after creation: {why_not_running()}",
                       reasons=frozenset({Reason.STARTUP_TIMEOUT}))
    result.come_back_in(timeout - waited)
    return None
