"""Observed state → actions, for one TrainingJob. Pure: no I/O, the clock is an argument.

The controller applies a Plan: create the Service, the mirror's objects and missing pods; delete pods;
write the status when it changed; post an event per phase change and per restart; come back after
`requeue_after` for timers (backoff, deadlines, TTL). Planning again on the same observations yields the
same plan minus what has been done, so it is safe after an operator restart and on every event.

This module only composes the policies, each in a module of its own (docs/architecture.md lists them).
The order of the steps is the order of precedence: a finished job only cleans up; a suspended job only
stops; a deadline beats everything still running; a gang that is restarting waits for its old pods and
its backoff; then the current attempt is created, judged, and restarted or finished. Whatever decided,
goodput.py then counts the seconds since the last pass into status.goodput.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.lifecycle import CleanPodPolicy
from multinode.api.timestamps import rfc3339
from multinode.reconcile import lifecycle
from multinode.reconcile.capacity import explain_unschedulable
from multinode.reconcile.checkpointing import (Resumer, mirror_needs, mirror_on_lost_node, report_mirror, resume_path,
                                               resumed_by)
from multinode.reconcile.exclusion import exclude_unhealthy_nodes, excluded_node_names
from multinode.reconcile.failures import Failure, lost_failure, lost_indices, pod_failure
from multinode.reconcile.final_sync import hold_for_final_sync
from multinode.reconcile.goodput import account
from multinode.reconcile.hang import hang_failure
from multinode.reconcile.gang import (GROUP_MODES, ObservedPodGroup, choose_gang, delete_old_pod_groups,
                                      ensure_pod_group, gang_verdict, placed_domain, scheduler_places_domain)
from multinode.reconcile.gang_fallback import release_partial_gang, wait_before_retry
from multinode.reconcile.image_consistency import check_digests, pinned_image
from multinode.reconcile.kueue import FLAVOR_WAIT_SECONDS, KueueGate, ObservedWorkload, finish_workload, kueue_gate
from multinode.reconcile.node_loss import NodeDown, evicted_failure, force_delete_stranded, not_ready_failure
from multinode.reconcile.observe import ObservedMirror, ObservedPod, PodPhase
from multinode.reconcile.outcome import TERMINAL_PHASES, Plan, PodStream, Verdict
from multinode.reconcile.placement import ObservedNode, attempt_node_selector
from multinode.reconcile.progress import JobProgress, report_progress
from multinode.reconcile.restarts import apply_failure_policy, ready_for_next_attempt
from multinode.reconcile.startup import note_first_bound, startup_timeout
from multinode.reconcile.status_report import change_phase, fill_node_statuses, set_conditions
from multinode.reconcile.stragglers import judge_stragglers, straggler_failure
from multinode.reconcile.success import judge, leader_succeeded
from multinode.render import (
    RenderSettings,
    attempt_env_name,
    render_attempt_env,
    render_headless_service,
    render_node_pod,
)
from multinode.render.kueue_workload import render_workload
from multinode.render.mirror_pod import render_mirror_objects
from multinode.render.names import job_name, pod_name

# How long after creating a job's PodGroup the next pass looks again without its watch event.
GROUP_WATCH_GRACE_SECONDS = 5.0

@dataclass(frozen=True)
class Observed:
    """What the controller's indices hold for one job."""

    pods: tuple[ObservedPod, ...] = ()
    service_exists: bool = False
    mirror: ObservedMirror | None = None
    # Latest mirrored checkpoint of the job named in spec.checkpointing.resumeFrom.trainingJob.
    resume_source_latest: str | None = None
    # The jobs of the namespace whose spec.checkpointing.resumeFrom.trainingJob names this one.
    resumers: tuple[Resumer, ...] = ()
    # Nodes, only when spec.topology asks for one domain, stragglers.action Exclude must know the job fits, or
    # a pod is Unschedulable and capacity.py tells why.
    nodes: tuple[ObservedNode, ...] = ()
    # Nodes that host the job's pods (its mirror's too) and are not Ready or are gone, by name (node_loss.py).
    down_nodes: Mapping[str, NodeDown] = field(default_factory=dict)
    # What the controller's log prober last read of the current attempt's ranks (spec.hangDetection only).
    progress: JobProgress | None = None
    # DisruptionTarget reasons of deleted pods, by name, from their last watch event.
    gone_disruptions: Mapping[str, str] = field(default_factory=dict)
    # Whether the apiserver serves native PodGroups (asked once at start), and this job's PodGroups.
    gang_api: bool = False
    pod_groups: tuple[ObservedPodGroup, ...] = ()
    # Kueue (reconcile/kueue.py): whether the apiserver serves its Workloads (asked once at start), this
    # job's Workload, every ResourceFlavor's nodeLabels by name, and the value of the job's PriorityClass.
    kueue_api: bool = False
    workload: ObservedWorkload | None = None
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    priority: int | None = None


def plan(job: TrainingJob, observed: Observed, *, previous: TrainingJobStatus | None, now: datetime,
         settings: RenderSettings) -> Plan:
    """Decide what to do about `job` given what is observed and the last status the operator wrote."""
    before = previous or job.status or TrainingJobStatus()
    result = _decide(job, observed, before, now, settings)
    # Last, once the pass has decided the job's state: the seconds since the last pass are counted by
    # the state the job was in, and a restart this pass made takes back the work it loses.
    result.come_back_in(account(before, result.status, now))
    return result


def _decide(job: TrainingJob, observed: Observed, before: TrainingJobStatus, now: datetime,
            settings: RenderSettings) -> Plan:
    status = before.model_copy(deep=True)
    # The mirror owns status.checkpoints; the object's copy is the freshest we have.
    status.checkpoints = job.status.checkpoints if job.status else None
    status.observed_generation = job.metadata.generation
    status.num_nodes = job.spec.num_nodes
    result = Plan(status=status)
    mirror = observed.mirror
    status.resumed_by = resumed_by(job, observed.resumers)

    if status.phase in TERMINAL_PHASES:
        delete_old_pod_groups(status, observed.pod_groups, result)
        result.workload_status = finish_workload(job, status, observed.workload, now)
        return lifecycle.clean_up_finished(job, status, list(observed.pods), mirror, result, now)

    if not observed.service_exists:
        result.service = render_headless_service(job)
    if job.spec.checkpointing is not None and not mirror_on_lost_node(job, mirror, observed.down_nodes, now, result):
        final_sync_done = bool(status.checkpoints and status.checkpoints.final_sync_time)
        create_mirror, delete_mirror = mirror_needs(mirror, final_sync_done)
        if create_mirror:
            result.objects_to_create = render_mirror_objects(job, settings)
        if delete_mirror and mirror is not None:
            result.delete([mirror.name])
        report_mirror(job, status, mirror, now)

    # Pods of earlier attempts never keep running, nor linger on a node that stopped answering.
    older = [p for p in observed.pods if p.attempt < status.attempt]
    result.delete(p.name for p in older if p.active)
    forced = force_delete_stranded(older, observed.down_nodes, result)
    older = [p for p in older if p.name not in forced]
    current = {p.index: p for p in observed.pods if p.attempt == status.attempt and p.index < job.spec.num_nodes}
    note_first_bound(status, current, now)

    gate = _kueue(job, status, observed, result, now, settings)
    if job.spec.suspend or (gate is not None and gate.hold):
        why = "spec.suspend is true" if job.spec.suspend and gate is None else "queued in Kueue, not admitted"
        return lifecycle.suspend(job, status, before, current, result, now, why)
    if status.phase == Phase.SUSPENDED:
        lifecycle.resume(status, current, result)
        current = {}

    if status.start_time is None:
        status.start_time = rfc3339(now)
    deadline = lifecycle.deadline_verdict(job, status, result, now)
    if deadline is not None:
        return _finish(job, status, before, current, deadline, result, now, observed)

    if status.phase == Phase.RESTARTING and not ready_for_next_attempt(job, status, older, result, now):
        fill_node_statuses(status, current, job.spec.num_nodes)
        return result
    waiting = wait_before_retry(job, status, older, result, now)
    if waiting is not None:
        return _report(job, status, before, current, waiting, result, now)

    blocked = _create_missing(job, status, before, current, observed, result, now, settings, gate)
    delete_old_pod_groups(status, observed.pod_groups, result)
    running = {i for i, p in current.items() if p.phase == PodPhase.RUNNING}
    report_progress(job, status, observed.progress, running, now)
    failure = _attempt_failure(job, status, before, current, observed, now, result) or hang_failure(
        job, status, current, observed.progress, now)
    if failure is not None:
        if failure.unhealthy_node:
            # Kept out of the next attempt; the node table shows the verdict while the gang restarts.
            exclude_unhealthy_nodes(job, status, (p for p in current.values() if p.phase == PodPhase.FAILED),
                                    result, now)
            fill_node_statuses(status, current, job.spec.num_nodes)
        return _fail_attempt(job, status, before, current, observed, failure, result, now)

    judge_stragglers(job, status, observed.progress, running, result, now)
    failure = straggler_failure(job, status, observed.nodes, result, now)
    if failure is not None:  # the straggler's node is excluded already
        return _fail_attempt(job, status, before, current, observed, failure, result, now)
    verdict = explain_unschedulable(job, judge(job, current), observed.nodes)
    if blocked is not None and verdict.phase == Phase.PENDING:
        verdict = blocked
    if verdict.phase in TERMINAL_PHASES:
        return _finish(job, status, before, current, verdict, result, now, observed)
    verdict = gang_verdict(job, status, current, observed.pod_groups, verdict, now)
    status.topology_domain = status.topology_domain or placed_domain(
        job, current, {n.name: n.labels for n in observed.nodes})
    verdict = release_partial_gang(job, status, current, result, now) or verdict
    if verdict.reason == Reason.PARTIAL_GANG_RELEASED:  # a new attempt: the released pods are not its own
        current = {}
    return _report(job, status, before, current, verdict, result, now)


def _kueue(job: TrainingJob, status: TrainingJobStatus, observed: Observed, result: Plan, now: datetime,
           settings: RenderSettings) -> KueueGate | None:
    """The job's Kueue integration (a job labelled with a queue name): its Workload, and whether it may run."""
    gate = kueue_gate(job, status, observed.workload, served=observed.kueue_api, flavors=observed.flavors,
                      pods=observed.pods, now=now)
    if gate is None:
        return None
    if gate.create_workload:
        result.objects_to_create.append(render_workload(job, settings, priority=observed.priority))
    if gate.delete_workload:
        result.workloads_to_delete.append(gate.delete_workload)
    result.workload_status = gate.workload_status
    result.job_suspend = gate.set_suspend
    return gate


def _report(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus, current: dict[int, ObservedPod],
            verdict: Verdict, result: Plan, now: datetime) -> Plan:
    fill_node_statuses(status, current, job.spec.num_nodes)
    set_conditions(status, verdict, created=len(current), num_nodes=job.spec.num_nodes, now=now,
                   generation=job.metadata.generation)
    change_phase(status, before, verdict, result)
    return result


def _fail_attempt(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus,
                  current: dict[int, ObservedPod], observed: Observed, failure: Failure, result: Plan,
                  now: datetime) -> Plan:
    """The failure policy's answer: the gang restarting, or the job failed."""
    failed = apply_failure_policy(job, status, failure, current, result, now)
    if failed is None:  # restarting: the pods on a node that is down go at once, not at its return
        force_delete_stranded(current.values(), observed.down_nodes, result)
        return result
    return _finish(job, status, before, current, failed, result, now, observed)


def _create_missing(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus,
                    current: dict[int, ObservedPod], observed: Observed, result: Plan, now: datetime,
                    settings: RenderSettings, kueue: KueueGate | None = None) -> Verdict | None:
    """Render the attempt's missing pods; a Verdict when something keeps them from being created."""
    missing = [i for i in range(job.spec.num_nodes) if i not in current]
    if not missing or lost_indices(job_name(job), job.spec.num_nodes, before, current, status.attempt):
        return None
    if kueue is not None and kueue.flavors_pending:
        result.come_back_in(FLAVOR_WAIT_SECONDS)
        return Verdict(Phase.PENDING, Reason.CREATING_PODS, "waiting to read the ResourceFlavors Kueue assigned")
    excluded = excluded_node_names(status, now)
    status.scheduling = choose_gang(job, status, current, observed.gang_api)
    group = status.scheduling.pod_group if status.scheduling.gang in GROUP_MODES else None
    handed = scheduler_places_domain(job, status, ensure_pod_group(job, status, observed.pod_groups, result))
    if handed is None:
        # The group's watch event brings the next pass, which creates the pods; the timer is there so that a
        # missed event (a watch restarted by its 410) cannot leave the job waiting for ever.
        result.come_back_in(GROUP_WATCH_GRACE_SECONDS)
        return Verdict(Phase.PENDING, Reason.CREATING_PODS, f"creating PodGroup {group} before the pods")
    node_selector, blocked = (None, None) if handed else attempt_node_selector(job, status, observed.nodes)
    if blocked is not None:
        return blocked
    if kueue is not None and kueue.node_selector:
        # Kueue's contract: the admitted flavors' nodeLabels select the nodes the pods run on.
        node_selector = {**(node_selector or {}), **kueue.node_selector}
    resume = resume_path(job, status, list(current.values()), observed.resume_source_latest)
    status.resumed_from = resume or None
    status.attempt_start_time = status.attempt_start_time or rfc3339(now)
    image = pinned_image(job, status)
    attempt, name, gang = status.attempt, job_name(job), status.scheduling.gang
    result.pods_to_create = PodStream(
        missing, lambda i: pod_name(name, i, attempt),
        lambda i: render_node_pod(job, i, attempt, settings, resume_from=resume, image=image,
                                  node_selector=node_selector, excluded_nodes=excluded, pod_group=group, gang=gang))
    result.attempt_env = render_attempt_env(job, status.attempt, restarts=status.restarts)
    if status.attempt > 0:
        result.stale_attempt_env = attempt_env_name(job, status.attempt - 1)
    return None


def _attempt_failure(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus,
                     current: dict[int, ObservedPod], observed: Observed, now: datetime,
                     result: Plan) -> Failure | None:
    """The attempt's failure, first found first: a failed, lost or evicted pod or one on a node that is
    down (none counts once the leader succeeded under LeaderOnly), different image digests, the startup
    timeout."""
    leader_done = leader_succeeded(job, current)
    # A pod we are deleting may report Failed on its way out (SIGTERM); that is not its failure.
    failed = [p for p in current.values() if p.phase == PodPhase.FAILED and not p.terminating]
    if failed and not leader_done:
        return pod_failure(failed)
    lost = lost_indices(job_name(job), job.spec.num_nodes, before, current, status.attempt)
    if lost and not leader_done:
        last = next((ns for ns in before.node_statuses if ns.index == lost[0]), None)
        # A pod deleted between two passes says why only in its last watch event (preemption, eviction).
        gone = (observed.gone_disruptions.get(pod_name(job_name(job), i, status.attempt)) for i in lost)
        why = next((g for g in gone if g), None) or (last.reason if last else None)
        return lost_failure(lost[0], last.pod if last else pod_name(job_name(job), lost[0], status.attempt), why)
    evicted = evicted_failure(current.values())
    if evicted is not None and not leader_done:
        return evicted
    on_down_node = None if leader_done else not_ready_failure(job, current.values(), observed.down_nodes, now, result)
    if on_down_node is not None:
        return on_down_node
    mismatch = check_digests(job, status, current, now)
    if mismatch is not None:
        return mismatch
    return startup_timeout(job, status, current, now, result, why_not_running=lambda: judge(job, current).message)


def _finish(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus, current: dict[int, ObservedPod],
            verdict: Verdict, result: Plan, now: datetime, observed: Observed) -> Plan:
    """Succeed or fail: stop the nodes at once; with checkpointing, wait for the final sync first (requested
    once no pod of the job may write)."""
    result.pods_to_create = []
    if job.spec.clean_pod_policy != CleanPodPolicy.NONE:
        result.delete(p.name for p in current.values() if p.active)
    fill_node_statuses(status, current, job.spec.num_nodes)
    if hold_for_final_sync(job, status, before, result, now, observed.pods):
        return result
    status.completion_time = rfc3339(now)
    status.next_attempt_time = None
    set_conditions(status, verdict, created=len(current), num_nodes=job.spec.num_nodes, now=now,
                   generation=job.metadata.generation)
    change_phase(status, before, verdict, result)
    result.delete(lifecycle.finished_job_deletions(job, list(current.values()), observed.mirror))
    return result
