"""Observed state → actions, for one TrainingJob. Pure: no I/O, the clock is an argument.

The controller applies a Plan: create the Service, the mirror's objects and missing pods; delete pods;
write the status when it changed; post an event per phase change and per restart; come back after
`requeue_after` for timers (backoff, deadlines, TTL). Planning again on the same observations yields the
same plan minus what has been done, so it is safe after an operator restart and on every event.

The order of the steps is the order of precedence: a finished job only cleans up; a suspended job only
stops; a deadline beats everything still running; a gang that is restarting waits for its old pods and
its backoff; then the current attempt is created, judged, and restarted or finished.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from multinode.api import NodeStatus, Phase, SuccessPolicy, TrainingJob, TrainingJobStatus
from multinode.api.constants import CONDITION_CHECKPOINTS_SYNCED
from multinode.api.lifecycle import CleanPodPolicy, FailureAction, MismatchAction, RestartStrategy
from multinode.reconcile import lifecycle
from multinode.reconcile.checkpointing import final_sync_gate, mirror_needs, resume_path
from multinode.reconcile.conditions import set_condition
from multinode.reconcile.failures import Failure, decide, lost_failure, pod_failure
from multinode.reconcile.node_loss import evicted_failure, stranded
from multinode.reconcile.lifecycle import parse_time, rfc3339
from multinode.reconcile.observe import ObservedMirror, ObservedPod
from multinode.reconcile.placement import ObservedNode, choose_domain, digest_reference, running_digests
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
    # Nodes, only when spec.topology asks for one domain.
    nodes: tuple[ObservedNode, ...] = ()
    # Nodes that host a terminating pod of the job and are not Ready or are gone (node_loss.py).
    unreachable_nodes: frozenset[str] = frozenset()


@dataclass
class Plan:
    service: dict | None = None
    # Created in order, before the pods (the mirror's identity before the mirror).
    objects_to_create: list[dict] = field(default_factory=list)
    pods_to_create: list[dict] = field(default_factory=list)
    pods_to_delete: list[str] = field(default_factory=list)
    # Deleted without waiting for a kubelet (grace period 0): terminating pods on nodes that are not Ready.
    pods_to_force_delete: list[str] = field(default_factory=list)
    status: TrainingJobStatus = field(default_factory=TrainingJobStatus)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_job: bool = False

    def delete(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self.pods_to_delete:
                self.pods_to_delete.append(name)

    def come_back_in(self, seconds: float | None) -> None:
        if seconds is not None:
            self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


@dataclass(frozen=True)
class Verdict:
    """The job's phase for the current attempt, and the words that explain it."""

    phase: Phase
    reason: str
    message: str


def plan(job: TrainingJob, observed: Observed, *, previous: TrainingJobStatus | None, now: datetime,
         settings: RenderSettings) -> Plan:
    """Decide what to do about `job` given what is observed and the last status the operator wrote."""
    before = previous or job.status or TrainingJobStatus()
    status = before.model_copy(deep=True)
    # The mirror owns status.checkpoints; the object's copy is the freshest we have.
    status.checkpoints = job.status.checkpoints if job.status else None
    status.observed_generation = job.metadata.generation
    status.num_nodes = job.spec.num_nodes
    result = Plan(status=status)
    mirror = observed.mirror

    if status.phase in TERMINAL_PHASES:
        # A finished job is never recreated; it cleans up, and goes when its TTL says so.
        result.delete(lifecycle.finished_job_deletions(job, list(observed.pods), mirror))
        expired, left = lifecycle.ttl_expired(job, status, now)
        result.delete_job = expired
        result.come_back_in(None if expired else left)
        return result

    if not observed.service_exists:
        result.service = render_headless_service(job)
    if job.spec.checkpointing is not None:
        create_mirror, delete_mirror = mirror_needs(mirror, bool(status.checkpoints and status.checkpoints.final_sync_time))
        if create_mirror:
            result.objects_to_create = render_mirror_objects(job, settings)
        if delete_mirror:
            result.delete([mirror.name])

    # Pods of earlier attempts never keep running, nor linger on a node that stopped answering.
    older = [p for p in observed.pods if p.attempt < status.attempt]
    result.delete(p.name for p in older if p.active)
    for p in stranded(older, observed.unreachable_nodes):
        result.pods_to_force_delete.append(p.name)
        result.events.append(Event("Warning", "PodForceDeleted",
                                    f"{p.name} of attempt {p.attempt} is stuck terminating on node {p.node}, "
                                    "which is not Ready: deleted without waiting for its kubelet"))
    older = [p for p in older if p.name not in result.pods_to_force_delete]
    current = {p.index: p for p in observed.pods if p.attempt == status.attempt and p.index < job.spec.num_nodes}

    if job.spec.suspend:
        return _suspend(job, status, before, current, result, now)
    if status.phase == Phase.SUSPENDED:
        ran = bool(current) or status.attempt_start_time is not None or any(ns.pod for ns in status.node_statuses)
        lifecycle.resume_after_suspend(status, ran=ran)
        result.events.append(Event("Normal", "Resumed", f"resumed as attempt {status.attempt}"))
        result.delete(p.name for p in current.values() if p.active)
        current = {}

    if status.start_time is None:
        status.start_time = rfc3339(now)
    exceeded, left = lifecycle.deadline_exceeded(job, status, now)
    if exceeded:
        verdict = Verdict(Phase.FAILED, "DeadlineExceeded",
                          f"activeDeadlineSeconds ({job.spec.active_deadline_seconds}s) passed since {status.start_time}")
        return _finish(job, status, before, current, verdict, result, now, mirror)
    result.come_back_in(left)

    if status.phase == Phase.RESTARTING and not _ready_for_next_attempt(job, status, older, result, now):
        _fill_node_statuses(status, current, job.spec.num_nodes)
        return result

    blocked = _create_missing(job, status, before, current, observed, result, now, settings)
    failure = _attempt_failure(job, status, before, current, now, result)
    if failure is not None:
        decision = decide(job.spec.failure_policy, failure)
        if decision.action == FailureAction.FAIL_JOB:
            verdict = Verdict(Phase.FAILED, failure.reason, f"{failure.message} ({decision.why}: FailJob)")
        elif lifecycle.restart_budget_spent(job, status, decision):
            verdict = Verdict(Phase.FAILED, "RestartLimitExceeded",
                              f"no restarts left (maxRestarts {job.spec.failure_policy.max_restarts}, "
                              f"{status.restarts} used); last failure: {failure.message}")
        else:
            message = lifecycle.begin_restart(job, status, failure, decision, now)
            result.pods_to_create = []
            result.delete(p.name for p in current.values() if p.active)
            result.events.append(Event("Warning", "Restarting", message))
            set_condition(status.conditions, "Running", "False", failure.reason, message, now=rfc3339(now),
                          generation=job.metadata.generation)
            # The next attempt waits for its backoff (and, blocking, for the old pods' deletion events).
            result.come_back_in(max(0.0, (parse_time(status.next_attempt_time, now) - now).total_seconds()))
            return result
        return _finish(job, status, before, current, verdict, result, now, mirror)

    verdict = judge(job, current)
    if blocked is not None and verdict.phase == Phase.PENDING:
        verdict = blocked
    if verdict.phase in TERMINAL_PHASES:
        return _finish(job, status, before, current, verdict, result, now, mirror)
    _fill_node_statuses(status, current, job.spec.num_nodes)
    _set_conditions(status, verdict, created=len(current), num_nodes=job.spec.num_nodes, now=now,
                    generation=job.metadata.generation)
    _change_phase(status, before, verdict, result)
    return result


def _suspend(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus, current: dict[int, ObservedPod],
             result: Plan, now: datetime) -> Plan:
    result.pods_to_create = []
    result.delete(p.name for p in current.values() if p.active)
    verdict = Verdict(Phase.SUSPENDED, "Suspended", "spec.suspend is true; no pods run")
    set_condition(status.conditions, "Suspended", "True", "Suspended", verdict.message, now=rfc3339(now),
                  generation=job.metadata.generation)
    set_condition(status.conditions, "Running", "False", "Suspended", verdict.message, now=rfc3339(now),
                  generation=job.metadata.generation)
    _fill_node_statuses(status, current, job.spec.num_nodes)
    status.ready_nodes, status.ready = 0, f"0/{job.spec.num_nodes}"
    _change_phase(status, before, verdict, result)
    return result


def _ready_for_next_attempt(job: TrainingJob, status: TrainingJobStatus, older: list[ObservedPod], result: Plan,
                            now: datetime) -> bool:
    """BlockingRecreate waits until the old attempt's pods are gone; both wait out the backoff."""
    blocking = job.spec.failure_policy.restart_strategy == RestartStrategy.BLOCKING_RECREATE
    lingering = [p for p in older if p.active or p.terminating]
    if blocking and lingering:
        set_condition(status.conditions, "Running", "False", "WaitingForOldPods",
                      f"{len(lingering)} pods of earlier attempts are still terminating", now=rfc3339(now),
                      generation=job.metadata.generation)
        return False
    if status.next_attempt_time:
        wait = (parse_time(status.next_attempt_time, now) - now).total_seconds()
        if wait > 0:
            set_condition(status.conditions, "Running", "False", "Backoff",
                          f"attempt {status.attempt} starts at {status.next_attempt_time}", now=rfc3339(now),
                          generation=job.metadata.generation)
            result.come_back_in(wait)
            return False
    status.next_attempt_time = None
    return True


def _create_missing(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus,
                    current: dict[int, ObservedPod], observed: Observed, result: Plan, now: datetime,
                    settings: RenderSettings) -> Verdict | None:
    """Render the attempt's missing pods; a Verdict when something keeps them from being created."""
    missing = [i for i in range(job.spec.num_nodes) if i not in current]
    if not missing or _lost(job, before, current, status.attempt):
        return None
    node_selector = None
    if job.spec.topology is not None:
        if status.topology_domain is None:
            domain, why = choose_domain(job, observed.nodes)
            if domain is None:
                return Verdict(Phase.PENDING, "NoTopologyDomain", why)
            status.topology_domain = domain
        node_selector = {job.spec.topology.same_domain_label: status.topology_domain}
    pin = job.spec.image_consistency.pin_digest and status.image_digest
    resume = resume_path(job, status, list(current.values()), observed.resume_source_latest)
    status.resumed_from = resume or None
    status.attempt_start_time = status.attempt_start_time or rfc3339(now)
    result.pods_to_create = [
        render_node_pod(job, i, status.attempt, settings, restarts=status.restarts, resume_from=resume,
                        image=status.image_digest if pin else None, node_selector=node_selector)
        for i in missing
    ]
    return None


def _lost(job: TrainingJob, before: TrainingJobStatus, current: dict[int, ObservedPod], attempt: int) -> list[int]:
    """Indices whose pod of this attempt was seen before and is gone now (deleted, evicted)."""
    known = {ns.index: ns.pod for ns in before.node_statuses if ns.phase}
    return [i for i in range(job.spec.num_nodes)
            if i not in current and known.get(i) == pod_name(job.metadata.name, i, attempt)]


def _attempt_failure(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus,
                     current: dict[int, ObservedPod], now: datetime, result: Plan) -> Failure | None:
    # A pod we are deleting may report Failed on its way out (SIGTERM); that is not its failure.
    failed = [p for p in current.values() if p.phase == "Failed" and not p.terminating]
    succeeded = {i for i, p in current.items() if p.phase == "Succeeded"}
    leader_done = job.spec.success_policy == SuccessPolicy.LEADER_ONLY and 0 in succeeded
    if failed and not leader_done:
        return pod_failure(failed)
    lost = _lost(job, before, current, status.attempt)
    if lost and not leader_done:
        last = next((ns for ns in before.node_statuses if ns.index == lost[0]), None)
        return lost_failure(lost[0], last.pod if last else None, last.reason if last else None)
    evicted = evicted_failure(current.values())
    if evicted is not None and not leader_done:
        return evicted
    mismatch = _digest_check(job, status, current, now)
    if mismatch is not None:
        return mismatch
    timeout = job.spec.startup_timeout_seconds
    all_running = len(current) == job.spec.num_nodes and all(p.phase in ("Running", "Succeeded") for p in current.values())
    if timeout and status.attempt_start_time and not all_running:
        waited = (now - parse_time(status.attempt_start_time, now)).total_seconds()
        if waited >= timeout:
            why = judge(job, current).message
            return Failure("StartupTimeout", f"pods not all running {timeout}s after creation: {why}",
                           reasons=frozenset({"StartupTimeout"}))
        result.come_back_in(timeout - waited)
    return None


def _digest_check(job: TrainingJob, status: TrainingJobStatus, current: dict[int, ObservedPod],
                  now: datetime) -> Failure | None:
    """Record the first digest; report (and by policy fail) an attempt whose pods run different ones."""
    running = [p for p in current.values() if p.phase in ("Running", "Succeeded")]
    digests = running_digests(running)
    if status.image_digest is None:
        first = next((digest_reference(p.image_id) for p in sorted(running, key=lambda p: p.index)
                      if digest_reference(p.image_id)), None)
        status.image_digest = first
    if len(digests) <= 1:
        if digests:
            set_condition(status.conditions, "ImageConsistent", "True", "SameDigest",
                          f"every running node runs {next(iter(digests))}", now=rfc3339(now),
                          generation=job.metadata.generation)
        return None
    detail = "; ".join(f"{d}: {', '.join(sorted(names))}" for d, names in sorted(digests.items()))
    message = f"pods of attempt {status.attempt} run different image digests: {detail}"
    set_condition(status.conditions, "ImageConsistent", "False", "ImageDigestMismatch", message,
                  now=rfc3339(now), generation=job.metadata.generation)
    if job.spec.image_consistency.on_mismatch == MismatchAction.FAIL_ATTEMPT:
        return Failure("ImageDigestMismatch", message, reasons=frozenset({"ImageDigestMismatch"}))
    return None


def _finish(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus, current: dict[int, ObservedPod],
            verdict: Verdict, result: Plan, now: datetime, mirror: ObservedMirror | None) -> Plan:
    """Succeed or fail: stop the nodes at once; with checkpointing, wait for the final sync first."""
    result.pods_to_create = []
    if job.spec.clean_pod_policy != CleanPodPolicy.NONE:
        result.delete(p.name for p in current.values() if p.active)
    _fill_node_statuses(status, current, job.spec.num_nodes)
    generation = job.metadata.generation
    if job.spec.checkpointing is not None:
        gate = final_sync_gate(job, status, now)
        synced = "True" if not gate.hold and gate.reason != "FinalSyncTimedOut" else "False"
        first_request = not any(c.type == CONDITION_CHECKPOINTS_SYNCED for c in before.conditions)
        set_condition(status.conditions, CONDITION_CHECKPOINTS_SYNCED, synced, gate.reason, gate.message,
                      now=rfc3339(now), generation=generation)
        if gate.hold:
            if first_request:
                result.events.append(Event("Normal", gate.reason, gate.message))
            set_condition(status.conditions, "Running", "False", "FinalSync", gate.message, now=rfc3339(now),
                          generation=generation)
            result.come_back_in(gate.requeue_after)
            return result
    status.completion_time = rfc3339(now)
    status.next_attempt_time = None
    _set_conditions(status, verdict, created=len(current), num_nodes=job.spec.num_nodes, now=now,
                    generation=generation)
    _change_phase(status, before, verdict, result)
    result.delete(lifecycle.finished_job_deletions(job, list(current.values()), mirror))
    return result


def _change_phase(status: TrainingJobStatus, before: TrainingJobStatus, verdict: Verdict, result: Plan) -> None:
    if verdict.phase != before.phase:
        status.phase = verdict.phase
        result.events.append(Event("Warning" if verdict.phase == Phase.FAILED else "Normal", verdict.reason,
                                   verdict.message))


def judge(job: TrainingJob, current: dict[int, ObservedPod]) -> Verdict:
    """The phase of an attempt that has not failed: succeeded, running, starting or pending, and why."""
    num_nodes = job.spec.num_nodes
    succeeded = {i for i, p in current.items() if p.phase == "Succeeded"}
    if job.spec.success_policy == SuccessPolicy.LEADER_ONLY and 0 in succeeded:
        return Verdict(Phase.SUCCEEDED, "LeaderSucceeded", "node 0 (the leader) succeeded")
    if len(succeeded) == num_nodes:
        return Verdict(Phase.SUCCEEDED, "AllNodesSucceeded", f"all {num_nodes} nodes succeeded")
    if len(current) < num_nodes:
        return Verdict(Phase.PENDING, "CreatingPods", f"{len(current)}/{num_nodes} pods created")
    by_index = sorted(current.values(), key=lambda p: p.index)
    unschedulable = [p for p in by_index if p.unschedulable]
    if unschedulable:
        p = unschedulable[0]
        return Verdict(Phase.PENDING, "Unschedulable",
                       f"{len(unschedulable)}/{num_nodes} pods cannot be scheduled; {p.name}: {p.unschedulable}")
    unscheduled = [p for p in by_index if p.node is None]
    if unscheduled:
        return Verdict(Phase.PENDING, "WaitingForScheduling", f"{len(unscheduled)}/{num_nodes} pods not scheduled yet")
    running = [p for p in by_index if p.phase == "Running"]
    if len(running) + len(succeeded) == num_nodes:
        return Verdict(Phase.RUNNING, "AllNodesRunning", f"all {num_nodes} nodes running")
    return _why_starting(by_index, running, num_nodes)


# Waiting reasons a user must act on, in the words of the condition reason we report.
_BLOCKING_WAITS = {"ErrImagePull": "ImagePullFailing", "ImagePullBackOff": "ImagePullFailing",
                   "InvalidImageName": "ImagePullFailing", "CrashLoopBackOff": "CrashLooping",
                   "CreateContainerConfigError": "ContainerConfigError", "RunContainerError": "ContainerConfigError"}


def _why_starting(pods: list[ObservedPod], running: list[ObservedPod], num_nodes: int) -> Verdict:
    stuck = [p for p in pods if p.waiting_reason in _BLOCKING_WAITS]
    if stuck:
        p = stuck[0]
        words = f": {p.waiting_message}" if p.waiting_message else ""
        return Verdict(Phase.STARTING, _BLOCKING_WAITS[p.waiting_reason],
                       f"{len(stuck)}/{num_nodes} pods cannot start; {p.name}: {p.waiting_reason}{words}")
    in_preflight = [p for p in pods if p.in_preflight]
    if in_preflight:
        return Verdict(Phase.STARTING, "WaitingForPeerDNS",
                       f"{len(in_preflight)}/{num_nodes} pods wait in preflight for peers' DNS names "
                       f"(first: {in_preflight[0].name}); `kubectl logs {in_preflight[0].name} -c preflight` says which")
    return Verdict(Phase.STARTING, "PodsStarting",
                   f"{len(running)}/{num_nodes} pods running; the rest are scheduled and starting")


def _set_conditions(status: TrainingJobStatus, verdict: Verdict, *, created: int, num_nodes: int,
                    now: datetime, generation: int | None) -> None:
    def put(type_: str, ok: bool, reason: str, message: str) -> None:
        set_condition(status.conditions, type_, "True" if ok else "False", reason, message,
                      now=rfc3339(now), generation=generation)

    all_created = created == num_nodes or verdict.phase in TERMINAL_PHASES
    put("Created", all_created, "PodsCreated" if all_created else "CreatingPods", f"{created}/{num_nodes} pods created")
    if verdict.phase == Phase.RUNNING:
        put("Running", True, verdict.reason, verdict.message)
    elif verdict.phase in TERMINAL_PHASES:
        put("Running", False, "JobFinished", f"job {verdict.phase.value.lower()}")
    else:
        put("Running", False, verdict.reason, verdict.message)
    if any(c.type == "Suspended" for c in status.conditions):
        put("Suspended", False, "Resumed", "spec.suspend is false")
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
            # Keep what we last saw of a vanished pod: it explains a NodeLost restart.
            nodes.append(previous.get(i) or NodeStatus(index=i))
            continue
        reason = p.disruption or p.reason or p.waiting_reason
        nodes.append(NodeStatus(index=i, pod=p.name, node=p.node, phase=p.phase, reason=reason, exit_code=p.exit_code))
    status.node_statuses = nodes
    status.ready_nodes = sum(1 for p in current.values() if p.phase == "Running" and p.ready)
    status.ready = f"{status.ready_nodes}/{num_nodes}"


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
