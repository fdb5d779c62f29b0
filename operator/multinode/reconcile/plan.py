"""Observed state → actions, for one TrainingJob. Pure: no I/O, the clock is an argument.

The controller applies a Plan (create the Service, the mirror's objects and missing pods, delete pods a
finished job must not leave running, write the status when it changed, post events for phase changes).
Running the planner again on the same observations yields the same plan minus what has been done, so it
is safe to call after an operator restart or as often as events arrive.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from multinode.api import NodeStatus, Phase, SuccessPolicy, TrainingJob, TrainingJobStatus
from multinode.api.constants import CONDITION_CHECKPOINTS_SYNCED
from multinode.reconcile.checkpointing import final_sync_gate, mirror_needs, resume_path
from multinode.reconcile.conditions import set_condition
from multinode.reconcile.observe import ObservedMirror, ObservedPod
from multinode.render import RenderSettings, pod_name, render_headless_service, render_node_pod
from multinode.render.mirror import render_mirror_objects

TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    """What the controller's indices hold for one job."""

    pods: tuple[ObservedPod, ...] = ()
    service_exists: bool = False
    mirror: ObservedMirror | None = None
    # Latest mirrored checkpoint of the job named in spec.checkpointing.resumeFrom.trainingJob.
    resume_source_latest: str | None = None


@dataclass
class Plan:
    service: dict | None = None
    # Created in order, before the pods (the mirror's identity before the mirror).
    objects_to_create: list[dict] = field(default_factory=list)
    pods_to_create: list[dict] = field(default_factory=list)
    pods_to_delete: list[str] = field(default_factory=list)
    status: TrainingJobStatus = field(default_factory=TrainingJobStatus)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None


@dataclass(frozen=True)
class Verdict:
    """The job's phase for the current attempt, and the words that explain it."""

    phase: Phase
    reason: str
    message: str


def rfc3339(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def plan(job: TrainingJob, observed: Observed, *, previous: TrainingJobStatus | None, now: datetime,
         settings: RenderSettings) -> Plan:
    """Decide what to do about `job` given what is observed and the last status the operator wrote."""
    before = previous or job.status or TrainingJobStatus()
    status = before.model_copy(deep=True)
    # The mirror owns status.checkpoints; the object's copy is the freshest we have.
    status.checkpoints = job.status.checkpoints if job.status else None
    attempt = status.attempt
    num_nodes = job.spec.num_nodes
    current = {p.index: p for p in observed.pods if p.attempt == attempt and p.index < num_nodes}
    result = Plan(status=status)
    mirror = observed.mirror

    if status.phase in TERMINAL_PHASES:
        # A finished job is never recreated; it only makes sure nothing of it keeps running.
        result.pods_to_delete = sorted(p.name for p in current.values() if p.active)
        if mirror is not None and mirror.active:
            result.pods_to_delete.append(mirror.name)
        _fill_node_statuses(status, current, num_nodes)
        return result

    if not observed.service_exists:
        result.service = render_headless_service(job)
    if job.spec.checkpointing is not None:
        create_mirror, delete_mirror = mirror_needs(mirror, bool(status.checkpoints and status.checkpoints.final_sync_time))
        if create_mirror:
            result.objects_to_create = render_mirror_objects(job, settings)
        if delete_mirror:
            result.pods_to_delete.append(mirror.name)

    missing = [i for i in range(num_nodes) if i not in current]
    known = {ns.index: ns.pod for ns in before.node_statuses if ns.phase}
    lost = [i for i in missing if known.get(i) == pod_name(job.metadata.name, i, attempt)]
    if not lost and missing:
        resume = resume_path(job, status, list(current.values()), observed.resume_source_latest)
        status.resumed_from = resume or None
        result.pods_to_create = [render_node_pod(job, i, attempt, settings, restarts=status.restarts,
                                                 resume_from=resume) for i in missing]
    if status.start_time is None:
        status.start_time = rfc3339(now)

    verdict = judge(job, current, lost)
    _fill_node_statuses(status, current, num_nodes)
    status.observed_generation = job.metadata.generation
    status.num_nodes = num_nodes
    status.ready_nodes = sum(1 for p in current.values() if p.phase == "Running" and p.ready)
    status.ready = f"{status.ready_nodes}/{num_nodes}"
    generation = job.metadata.generation

    if verdict.phase in TERMINAL_PHASES:
        # Nothing more is created, and no node keeps its GPUs, whether or not the mirror still syncs.
        result.pods_to_create = []
        result.pods_to_delete += sorted(p.name for p in current.values() if p.active)
        if job.spec.checkpointing is not None:
            gate = final_sync_gate(job, status, now)
            set_condition(status.conditions, CONDITION_CHECKPOINTS_SYNCED, "False" if gate.hold or
                          gate.reason == "FinalSyncTimedOut" else "True", gate.reason, gate.message,
                          now=rfc3339(now), generation=generation)
            if gate.hold:
                if not _condition_was(before, CONDITION_CHECKPOINTS_SYNCED):
                    result.events.append(Event("Normal", gate.reason, gate.message))
                result.requeue_after = gate.requeue_after
                _set_conditions(status, Verdict(status.phase or Phase.RUNNING, "FinalSync", gate.message),
                                created=len(current), num_nodes=num_nodes, now=now, generation=generation)
                return result
        status.completion_time = rfc3339(now)
        if mirror is not None and mirror.active and mirror.name not in result.pods_to_delete:
            result.pods_to_delete.append(mirror.name)

    _set_conditions(status, verdict, created=len(current), num_nodes=num_nodes, now=now, generation=generation)
    if verdict.phase != before.phase:
        status.phase = verdict.phase
        failed = verdict.phase == Phase.FAILED
        result.events.append(Event("Warning" if failed else "Normal", verdict.reason, verdict.message))
    return result


def _condition_was(status: TrainingJobStatus, type_: str) -> bool:
    return any(c.type == type_ for c in status.conditions)


def judge(job: TrainingJob, current: dict[int, ObservedPod], lost: list[int]) -> Verdict:
    """The phase of the attempt. Any failed or vanished pod fails the job (restarts come later)."""
    num_nodes = job.spec.num_nodes
    # A pod we are deleting may report Failed on its way out (SIGTERM); that is not its failure.
    failed = sorted((p for p in current.values() if p.phase == "Failed" and not p.terminating), key=lambda p: p.index)
    if failed:
        p = failed[0]
        detail = f"exit code {p.exit_code}" if p.exit_code is not None else "no exit code"
        why = f", reason {p.reason}" if p.reason else ""
        words = f": {p.message}" if p.message else ""
        more = f" ({len(failed) - 1} more pods failed)" if len(failed) > 1 else ""
        reason = "PreflightFailed" if p.reason == "PreflightFailed" else "PodFailed"
        return Verdict(Phase.FAILED, reason, f"pod {p.name} (node {p.index}) failed: {detail}{why}{words}{more}")

    succeeded = {i for i, p in current.items() if p.phase == "Succeeded"}
    # Before the lost check: once the leader succeeded, LeaderOnly stops the workers on purpose.
    if job.spec.success_policy == SuccessPolicy.LEADER_ONLY and 0 in succeeded:
        return Verdict(Phase.SUCCEEDED, "LeaderSucceeded", "node 0 (the leader) succeeded")
    if lost:
        return Verdict(Phase.FAILED, "PodLost",
                       f"pod of node {lost[0]} was deleted before it finished; the gang cannot continue without it")
    if len(succeeded) == num_nodes:
        return Verdict(Phase.SUCCEEDED, "AllNodesSucceeded", f"all {num_nodes} nodes succeeded")

    if len(current) < num_nodes:
        return Verdict(Phase.PENDING, "CreatingPods", f"{len(current)}/{num_nodes} pods created")
    unschedulable = sorted((p for p in current.values() if p.unschedulable), key=lambda p: p.index)
    if unschedulable:
        p = unschedulable[0]
        return Verdict(Phase.PENDING, "Unschedulable",
                       f"{len(unschedulable)}/{num_nodes} pods cannot be scheduled; {p.name}: {p.unschedulable}")
    unscheduled = [p for p in current.values() if p.node is None]
    if unscheduled:
        return Verdict(Phase.PENDING, "WaitingForScheduling", f"{len(unscheduled)}/{num_nodes} pods not scheduled yet")
    running = [p for p in current.values() if p.phase == "Running"]
    if len(running) + len(succeeded) == num_nodes:
        return Verdict(Phase.RUNNING, "AllNodesRunning", f"all {num_nodes} nodes running")
    return Verdict(Phase.STARTING, "PodsStarting",
                   f"{len(running)}/{num_nodes} pods running; the rest are scheduled and starting")


def _set_conditions(status: TrainingJobStatus, verdict: Verdict, *, created: int, num_nodes: int,
                    now: datetime, generation: int | None) -> None:
    def put(type_: str, ok: bool, reason: str, message: str) -> None:
        set_condition(status.conditions, type_, "True" if ok else "False", reason, message,
                      now=rfc3339(now), generation=generation)

    all_created = created == num_nodes or verdict.phase in TERMINAL_PHASES
    put("Created", all_created, "PodsCreated" if all_created else "CreatingPods",
        f"{created}/{num_nodes} pods created")
    if verdict.phase == Phase.RUNNING and verdict.reason != "FinalSync":
        put("Running", True, verdict.reason, verdict.message)
    elif verdict.phase in TERMINAL_PHASES:
        put("Running", False, "JobFinished", f"job {verdict.phase.value.lower()}")
    else:
        put("Running", False, verdict.reason, verdict.message)
    if verdict.phase == Phase.SUCCEEDED:
        put("Succeeded", True, verdict.reason, verdict.message)
    if verdict.phase == Phase.FAILED:
        put("Failed", True, verdict.reason, verdict.message)


def _fill_node_statuses(status: TrainingJobStatus, current: dict[int, ObservedPod], num_nodes: int) -> None:
    previous = {ns.index: ns for ns in status.node_statuses}
    nodes = []
    for i in range(num_nodes):
        p = current.get(i)
        if p is None:
            # Keep what we last saw of a vanished pod: it explains a PodLost failure.
            nodes.append(previous.get(i) or NodeStatus(index=i))
            continue
        nodes.append(NodeStatus(index=i, pod=p.name, node=p.node, phase=p.phase, reason=p.reason,
                                exit_code=p.exit_code))
    status.node_statuses = nodes


def fail_job(result: Plan, reason: str, message: str, *, now: datetime, pods: Iterable[ObservedPod]) -> Plan:
    """Turn a plan into the job's failure: nothing more is created, active pods go, the status says why.

    Pods created moments ago may not be observed yet; the next reconcile sees them and, the job being
    terminal, deletes them.
    """
    status = result.status
    attempt = status.attempt
    mark_failed(status, reason, message, now=now)
    events = [*result.events, Event("Warning", reason, message)]
    to_delete = sorted(p.name for p in pods if p.attempt == attempt and p.active)
    return Plan(pods_to_delete=to_delete, status=status, events=events)


def mark_failed(status: TrainingJobStatus, reason: str, message: str, *, now: datetime,
                generation: int | None = None) -> None:
    status.phase = Phase.FAILED
    status.completion_time = status.completion_time or rfc3339(now)
    set_condition(status.conditions, "Running", "False", "JobFinished", "job failed",
                  now=rfc3339(now), generation=generation)
    set_condition(status.conditions, "Failed", "True", reason, message, now=rfc3339(now), generation=generation)
