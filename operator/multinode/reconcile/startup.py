"""Startup: why an attempt's pods are scheduled but not all running, and the startup timeout.

spec.startupTimeoutSeconds (30 minutes unless set; 0 turns it off) counts from the moment the operator first
saw a pod of the attempt bound to a node (status.attemptScheduledTime, the operator's own clock): bound pods
hold their nodes' GPUs, queued or unschedulable ones do not. When it passes before every pod runs, the
attempt fails with StartupTimeout and the reason it was stuck (the failure policy then decides between a
restart and failing the job).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.timestamps import parse_time
from multinode.reconcile.failures import Failure
from multinode.api.constants import TRAINER_CONTAINER
from multinode.api.timestamps import rfc3339
from multinode.reconcile.observe import ObservedPod, PodPhase, Wait
from multinode.reconcile.decision import Decision
from multinode.reconcile.outcome import Verdict

# Waiting reasons (Kubernetes' words) a user must act on, in the words of the condition reason we report.
# Keyed by str | None: a pod's waiting reason may be absent, and then it is not blocking.
BLOCKING_WAITS: dict[str | None, Reason] = {
    "ErrImagePull": Reason.IMAGE_PULL_FAILING, "ImagePullBackOff": Reason.IMAGE_PULL_FAILING,
    "InvalidImageName": Reason.IMAGE_PULL_FAILING, "CrashLoopBackOff": Reason.CRASH_LOOPING,
    "CreateContainerConfigError": Reason.CONTAINER_CONFIG_ERROR,
    "RunContainerError": Reason.CONTAINER_CONFIG_ERROR,
}


# Where the image of the preflight init container and of the mirror pod comes from: the operator's own image.
OPERATOR_IMAGE_SETTING = ("it is the operator's image: the chart's image.repository and image.tag set it "
                          "(the operator's MULTINODE_OPERATOR_IMAGE)")


def describe_wait(wait: Wait) -> str:
    """A blocked container in words that say what to change: which image, and where it is set."""
    words = f"{wait.reason}: {wait.message}" if wait.message else str(wait.reason)
    if BLOCKING_WAITS.get(wait.reason) != Reason.IMAGE_PULL_FAILING:
        return words
    if wait.container == TRAINER_CONTAINER:
        return f"the trainer image {wait.image} (spec.image) cannot be pulled ({words})"
    return f"the {wait.container} image {wait.image} cannot be pulled ({words}); {OPERATOR_IMAGE_SETTING}"


def why_starting(pods: list[ObservedPod], running: list[ObservedPod], num_nodes: int) -> Verdict:
    """Every pod is scheduled and some are not running yet: what they wait for, most actionable first."""
    stuck = [p for p in pods if p.waiting_reason in BLOCKING_WAITS]
    if stuck:
        p = stuck[0]
        wait = Wait(p.waiting_reason, p.waiting_message, p.waiting_container, p.waiting_image)
        return Verdict(Phase.STARTING, BLOCKING_WAITS[p.waiting_reason],
                       f"{len(stuck)}/{num_nodes} pods cannot start; {p.name}: {describe_wait(wait)}")
    in_preflight = [p for p in pods if p.in_preflight]
    if in_preflight:
        return Verdict(Phase.STARTING, Reason.WAITING_FOR_PEER_DNS,
                       f"{len(in_preflight)}/{num_nodes} pods wait in preflight for peers' DNS names "
                       f"(first: {in_preflight[0].name}); "
                       f"`kubectl logs {in_preflight[0].name} -c preflight` says which")
    return Verdict(Phase.STARTING, Reason.PODS_STARTING,
                   f"{len(running)}/{num_nodes} pods running; the rest are scheduled and starting")


def note_first_bound(status: TrainingJobStatus, current: dict[int, ObservedPod], now: datetime) -> Decision:
    """When a pod of the attempt was first seen bound to a node (status.attemptScheduledTime), if not yet known."""
    if status.attempt_scheduled_time is None and any(p.node for p in current.values()):
        return Decision(status={"attempt_scheduled_time": rfc3339(now)})
    return Decision()


def startup_timeout(job: TrainingJob, status: TrainingJobStatus, current: dict[int, ObservedPod], now: datetime,
                    *, why_not_running: Callable[[], str]) -> Decision:
    """StartupTimeout once the timeout passed with pods not all running; until then, come back when it would."""
    timeout = job.spec.startup_timeout_seconds
    started = (PodPhase.RUNNING, PodPhase.SUCCEEDED)
    all_running = len(current) == job.spec.num_nodes and all(p.phase in started for p in current.values())
    # A topology domain the operator chose (spec.topology without the native gang) may be full: waiting in it
    # counts from the attempt's start, so the next attempt may choose another.
    chosen_domain = status.topology_domain is not None and status.attempt_scheduled_time is None
    counted_from = status.attempt_start_time if chosen_domain else status.attempt_scheduled_time
    if not (timeout and counted_from and not all_running):
        return Decision()
    waited = (now - parse_time(counted_from, now)).total_seconds()
    if waited >= timeout:
        return Decision(failure=Failure(
            Reason.STARTUP_TIMEOUT,
            f"pods not all running {timeout}s after the first was bound to a node: {why_not_running()}",
            reasons=frozenset({Reason.STARTUP_TIMEOUT})))
    return Decision(requeue_after=timeout - waited)
