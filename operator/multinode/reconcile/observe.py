"""What the reconciler needs to know about a pod, read from the raw object once per watch event.

The controller keeps only these small records in memory (not whole pod objects): a 1000-node job's
pods cost kilobytes, and the planner never has to dig through raw dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from multinode.api import LABEL_ATTEMPT, LABEL_JOB_NAME, LABEL_MIRROR_OF, LABEL_NODE_INDEX
from multinode.api.constants import ANNOTATION_JOINED_IN, ANNOTATION_NODE_INDEX, LABEL_RENDEZVOUS_STORE, LABEL_SPARE
from multinode.api.conditions import Reason
from multinode.api.constants import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_RESUME_FROM,
    ANNOTATION_TRAINER_RESTARTS,
    PREFLIGHT_CONTAINER,
    TRAINER_CONTAINER,
    EnvName,
)
from multinode.api.health_check import HealthStatus, NodeHealth, parse_health_message
from multinode.reconcile.ownership import controller_uid


class PodPhase:
    """Kubernetes' pod phases, as the planner reads them."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


# Still holds (or is about to hold) resources.
ACTIVE_POD_PHASES = (PodPhase.PENDING, PodPhase.RUNNING, PodPhase.UNKNOWN)


# The `index` of an elastic job's rendezvous store pod, which has none.
RENDEZVOUS_STORE_INDEX = -2


@dataclass(frozen=True)
class ObservedPod:
    name: str
    job_name: str
    index: int
    attempt: int
    phase: str
    node: str | None = None
    terminating: bool = False
    ready: bool = False
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    # The scheduler's words when it cannot place the pod (PodScheduled=False, Unschedulable).
    unschedulable: str | None = None
    # Since when (the PodScheduled condition's lastTransitionTime, RFC3339): the scheduler refused it first then.
    unschedulable_since: str | None = None
    # MULTINODE_RESUME_FROM as rendered: every pod of one attempt must resume from the same place.
    resume_from: str | None = None
    # Reason of a DisruptionTarget condition (DeletionByTaintManager, EvictionByEvictionAPI, ...).
    disruption: str | None = None
    # Why a container waits (ErrImagePull, ImagePullBackOff, CrashLoopBackOff, ...), its words, which
    # container (the preflight init container or the trainer) and the image it runs.
    waiting_reason: str | None = None
    waiting_message: str | None = None
    waiting_container: str | None = None
    waiting_image: str | None = None
    # The preflight init container is still waiting for peers' DNS names.
    in_preflight: bool = False
    # When the running preflight started (RFC3339): a pod restarted in place, at its barrier, since then.
    preflight_started_at: str | None = None
    # imageID the runtime reported for the trainer (registry/image@sha256:...).
    image_id: str | None = None
    # The node health check's verdict, from the preflight's termination message (spec.healthCheck).
    health: NodeHealth | None = None

    # When the trainer container started (RFC3339): hang detection's clock starts when every rank's has.
    started_at: str | None = None

    # The native PodGroup the pod joined (spec.schedulingGroup.podGroupName), if any.
    pod_group: str | None = None

    # The uid of the TrainingJob controlling the pod (None: none does): only the job of that uid counts it.
    owner_uid: str | None = None

    # failurePolicy.restartStrategy InPlace: the trainer's restart count, the attempt the pod's annotations
    # name (None: not an InPlace pod) and the restart count the pod reaches once it runs that attempt.
    trainer_restarts: int = 0
    in_place_attempt: int | None = None
    in_place_trainer_restarts: int = 0
    # The trainer container carries restartPolicyRules (the apiserver drops them where they are not served).
    restart_rules: bool = False
    # A hot spare's serial (spec.spareNodes): None for a node pod. A spare that took a node's rank has that
    # node's index and the attempt it joined in as `index` and `attempt`; one still waiting has -1 for both.
    spare: int | None = None
    # The pod's UID: an elastic job goes on without a lost pod, whose replacement has its name (elastic.py).
    uid: str | None = None

    @property
    def rendezvous_store(self) -> bool:
        """An elastic job's rendezvous store (render/rendezvous_store.py): not a node's pod."""
        return self.index == RENDEZVOUS_STORE_INDEX

    @property
    def waiting_spare(self) -> bool:
        """A spare that has not taken a rank: not a pod of any attempt."""
        return self.spare is not None and self.index < 0

    @property
    def unhealthy(self) -> bool:
        return self.health is not None and self.health.status == HealthStatus.FAILED

    @property
    def runs_attempt(self) -> int:
        """The attempt the pod runs: the one it was created for, or the one an in-place restart told it."""
        return self.in_place_attempt if self.in_place_attempt is not None else self.attempt

    @property
    def restarted_undeclared(self) -> bool:
        """Its trainer restarted in place past the count its annotations expect: a restart no attempt has been
        declared for yet (in_place.py)."""
        return self.trainer_restarts > self.in_place_trainer_restarts

    @property
    def active(self) -> bool:
        """Still holds (or is about to hold) resources: the kind of pod a finished job must not leave."""
        return self.phase in ACTIVE_POD_PHASES and not self.terminating


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    value = labels.get(key)
    if value is None or not value.isdigit():
        return None
    return int(value)


def _terminated(statuses: list[Mapping[str, Any]] | None, container: str) -> Mapping[str, Any] | None:
    for cs in statuses or []:
        if cs.get("name") == container:
            return (cs.get("state") or {}).get("terminated")
    return None


def observe_pod(pod: Mapping[str, Any]) -> ObservedPod | None:
    """Project a raw pod onto what planning needs; None for pods without our labels."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    job_name = labels.get(LABEL_JOB_NAME)
    spare = _int_label(labels, LABEL_SPARE)
    index: int | None
    attempt: int | None
    if LABEL_RENDEZVOUS_STORE in labels:
        index, attempt = RENDEZVOUS_STORE_INDEX, _int_label(labels, LABEL_RENDEZVOUS_STORE)
    elif spare is None:
        index, attempt = _int_label(labels, LABEL_NODE_INDEX), _int_label(labels, LABEL_ATTEMPT)
    else:  # a rank taken (both annotations, written in one patch) or none yet
        index, attempt = _int_label(annotations, ANNOTATION_NODE_INDEX), _int_label(annotations, ANNOTATION_JOINED_IN)
        if index is None or attempt is None:
            index = attempt = -1
    if job_name is None or index is None or attempt is None:
        return None
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = (conditions.get("Ready") or {}).get("status") == "True"
    scheduled = conditions.get("PodScheduled") or {}
    unschedulable = unschedulable_since = None
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        unschedulable = scheduled.get("message") or "Unschedulable"
        unschedulable_since = scheduled.get("lastTransitionTime")

    exit_code = reason = message = None
    preflight = _terminated(status.get("initContainerStatuses"), PREFLIGHT_CONTAINER)
    trainer = _terminated(status.get("containerStatuses"), TRAINER_CONTAINER)
    health = parse_health_message(preflight.get("message")) if preflight is not None else None
    if preflight is not None and preflight.get("exitCode", 0) != 0:
        exit_code, reason = preflight.get("exitCode"), Reason.PREFLIGHT_FAILED
        message = preflight.get("message") or preflight.get("reason")
        if health is not None and health.status == HealthStatus.FAILED:
            reason, message = Reason.NODE_UNHEALTHY, f"{health.reason}: {health.message}"
    elif trainer is not None:
        exit_code, reason, message = trainer.get("exitCode"), trainer.get("reason"), trainer.get("message")
    if status.get("reason"):  # pod-level reasons (Evicted, DeadlineExceeded, ...) say more
        reason, message = status.get("reason"), status.get("message") or message

    disruption = conditions.get("DisruptionTarget") or {}
    waiting = _blocking_wait(status)
    preflight_running = next((((cs.get("state") or {}).get("running") or {})
                              for cs in status.get("initContainerStatuses") or []
                              if cs.get("name") == PREFLIGHT_CONTAINER and "running" in (cs.get("state") or {})), None)
    in_preflight = preflight_running is not None
    image_id = next((cs.get("imageID") for cs in status.get("containerStatuses") or []
                     if cs.get("name") == TRAINER_CONTAINER and cs.get("imageID")), None)
    started_at = next((((cs.get("state") or {}).get("running") or {}).get("startedAt")
                       for cs in status.get("containerStatuses") or [] if cs.get("name") == TRAINER_CONTAINER), None)
    trainer_restarts = next((cs.get("restartCount") or 0 for cs in status.get("containerStatuses") or []
                             if cs.get("name") == TRAINER_CONTAINER), 0)
    in_place_attempt = _int_label(annotations, ANNOTATION_ATTEMPT)
    resume_from = (annotations.get(ANNOTATION_RESUME_FROM, "") if in_place_attempt is not None
                   else _env_value(spec, TRAINER_CONTAINER, EnvName.MULTINODE_RESUME_FROM))
    return ObservedPod(
        resume_from=resume_from,
        trainer_restarts=trainer_restarts,
        in_place_attempt=in_place_attempt,
        in_place_trainer_restarts=_int_label(annotations, ANNOTATION_TRAINER_RESTARTS) or 0,
        restart_rules=any(c.get("name") == TRAINER_CONTAINER and bool(c.get("restartPolicyRules"))
                          for c in spec.get("containers") or []),
        spare=spare,
        disruption=disruption.get("reason") if disruption.get("status") == "True" else None,
        waiting_reason=waiting.reason,
        waiting_message=waiting.message,
        waiting_container=waiting.container,
        waiting_image=waiting.image,
        in_preflight=in_preflight,
        preflight_started_at=(preflight_running or {}).get("startedAt"),
        image_id=image_id,
        health=health,
        started_at=started_at,
        pod_group=(spec.get("schedulingGroup") or {}).get("podGroupName"),
        owner_uid=controller_uid(meta),
        uid=meta.get("uid"),
        name=meta.get("name", ""),
        job_name=job_name,
        index=index,
        attempt=attempt,
        phase=status.get("phase") or PodPhase.PENDING,
        node=spec.get("nodeName"),
        terminating=meta.get("deletionTimestamp") is not None,
        ready=ready,
        exit_code=exit_code,
        reason=reason,
        message=message,
        unschedulable=unschedulable,
        unschedulable_since=unschedulable_since,
    )


@dataclass(frozen=True)
class Wait:
    """A container waiting for something other than its turn: why, in Kubernetes' words and its own."""

    reason: str | None = None
    message: str | None = None
    container: str | None = None
    image: str | None = None


def _blocking_wait(status: Mapping[str, Any]) -> Wait:
    """The first container (init containers first) that waits for a reason other than its turn."""
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "PodInitializing", "ContainerCreating"):
            return Wait(waiting.get("reason"), waiting.get("message"), cs.get("name"), cs.get("image"))
    return Wait()


def _env_value(spec: Mapping[str, Any], container: str, name: str) -> str | None:
    for c in spec.get("containers") or []:
        if c.get("name") == container:
            for var in c.get("env") or []:
                if var.get("name") == name:
                    # The apiserver drops an empty value: present without one means "".
                    return var.get("value") or ""
    return None


@dataclass(frozen=True)
class ObservedMirror:
    name: str
    job_name: str
    phase: str
    terminating: bool = False
    # Why its container waits, if for anything but its turn (an image that cannot be pulled).
    waiting: Wait = Wait()
    owner_uid: str | None = None
    node: str | None = None   # where it was scheduled: a node that stops answering takes it down

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE_POD_PHASES and not self.terminating


def observe_mirror_pod(pod: Mapping[str, Any]) -> ObservedMirror | None:
    meta = pod.get("metadata") or {}
    job_name = (meta.get("labels") or {}).get(LABEL_MIRROR_OF)
    if job_name is None:
        return None
    status = pod.get("status") or {}
    return ObservedMirror(name=meta.get("name", ""), job_name=job_name, phase=status.get("phase") or PodPhase.PENDING,
                          terminating=meta.get("deletionTimestamp") is not None, waiting=_blocking_wait(status),
                          owner_uid=controller_uid(meta), node=(pod.get("spec") or {}).get("nodeName"))
