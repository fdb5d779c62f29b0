"""Observed state → actions, for one TrainingJob. Pure: no I/O, the clock is an argument.

The controller applies a Plan: create the Service, the mirror's objects and missing pods; delete pods;
write the status when it changed; post an event per phase change and per restart; come back after
`requeue_after` for timers (backoff, deadlines, TTL). Planning again on the same observations yields the
same plan minus what has been done, so it is safe after an operator restart and on every event.

This module only composes the policies, each in a module of its own (docs/architecture.md lists them).
Each policy returns a Decision (decision.py) and changes nothing it is given; `_decide` folds the decisions,
one after the other, into the pass's status and Plan, so every policy reads the status the ones before it
left. The order is the order of precedence, and each step says why it comes where it does: a finished job
only cleans up; a suspended job only stops; a deadline beats everything still running; a gang that is
restarting waits for its old pods and its backoff; then the current attempt is created, checked for a
failure (ATTEMPT_FAILURES, first found first), judged, and restarted or finished. Whatever decided,
goodput.py then counts the seconds since the last pass into status.goodput.
"""

from __future__ import annotations

from datetime import datetime

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.base import deep_copied
from multinode.api.conditions import Reason
from multinode.api.lifecycle import CleanPodPolicy
from multinode.api.status import TERMINAL_PHASES
from multinode.api.timestamps import rfc3339
from multinode.reconcile import lifecycle
from multinode.reconcile.attempt_failures import attempt_failure
from multinode.reconcile.capacity import explain_unschedulable
from multinode.reconcile.checkpointing import mirror_needs, mirror_on_lost_node, report_mirror, resume_path, resumed_by
from multinode.reconcile.decision import Decision
from multinode.reconcile.disruption import checkpoint_before_disruption
from multinode.reconcile.elastic import (
    due_indices,
    elastic_verdict,
    grow,
    grow_outside_group,
    shed_indices,
    sheds,
    shrink,
    split,
    without_shed,
)
from multinode.reconcile.exclusion import exclude_unhealthy_nodes, excluded_node_names, prune_expired
from multinode.reconcile.failures import Failure, lost_indices
from multinode.reconcile.final_sync import hold_for_final_sync
from multinode.reconcile.goodput import account
from multinode.reconcile.gang import choose_gang, gang_verdict, ganging, placed_domain
from multinode.reconcile.gang_fallback import release_partial_gang, wait_before_retry
from multinode.reconcile.image_consistency import pinned_image
from multinode.reconcile.in_place import (
    abandon,
    current_pods,
    declare,
    in_place_failure,
    in_place_verdict,
    replaced_index,
    rules_kept,
)
from multinode.reconcile.integration import Gate
from multinode.reconcile.kstatus import mark_kstatus
from multinode.reconcile.lease_loss import hold_for_leases, judge_stale_leases
from multinode.reconcile.node_loss import LEASE_STALE, NodeDown, force_delete_stranded
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.observed import Observed
from multinode.reconcile.outcome import Plan, PodStream, Verdict
from multinode.reconcile.placement import attempt_node_selector
from multinode.reconcile.progress import report_progress
from multinode.reconcile.rendezvous_store import keep_store
from multinode.reconcile.restart_strategy import choose_restart_strategy, with_restart_strategy
from multinode.reconcile.restarts import apply_failure_policy, wait_for_next_attempt
from multinode.reconcile.planning_pass import Pass, with_gate_selectors
from multinode.reconcile.replacement import give_rank_to_spare, keep_spare_pool, replace_missing
from multinode.reconcile.spares import drop_spares, pick_spare
from multinode.reconcile.startup import note_first_bound
from multinode.reconcile.status_report import node_table, phase_change, verdict_conditions
from multinode.reconcile.stragglers import judge_stragglers, straggler_failure
from multinode.reconcile.success import judge
from multinode.render import (
    RenderSettings,
    attempt_env_name,
    render_attempt_env,
    render_headless_service,
    render_node_pod,
)
from multinode.render.disruption_budget import render_disruption_budget, wants_disruption_budget
from multinode.render.mirror_pod import render_mirror_objects
from multinode.render.names import job_name, pod_name
from multinode.render.pod import PodKeys

# How long after creating a job's PodGroup the next pass looks again without its watch event.
GROUP_WATCH_GRACE_SECONDS = 5.0

def plan(job: TrainingJob, observed: Observed, *, previous: TrainingJobStatus | None, now: datetime,
         settings: RenderSettings) -> Plan:
    """Decide what to do about `job` given what is observed and the last status the operator wrote."""
    before = previous or job.status or TrainingJobStatus()
    p = _decide(job, observed, before, now, settings)
    # Last, once the pass has decided the job's state: the seconds since the last pass are counted by
    # the state the job was in, and a restart this pass made takes back the work it loses.
    p.take(account(before, p.status, now))
    mark_kstatus(p.result.status, now=now, generation=job.metadata.generation)
    return p.result


def _decide(job: TrainingJob, observed: Observed, before: TrainingJobStatus, now: datetime,
            settings: RenderSettings) -> Pass:
    status = deep_copied(before)
    # The mirror owns status.checkpoints; the object's copy is the freshest we have.
    status.checkpoints = job.status.checkpoints if job.status else None
    status.observed_generation = job.metadata.generation
    status.num_nodes = job.spec.num_nodes
    status.resumed_by = resumed_by(job, observed.resumers)
    p = Pass(job, observed, before, now, settings, Plan(status=status))
    take, result, mirror, n = p.take, p.result, observed.mirror, job.spec.num_nodes

    # 1. A finished job is never recreated: it only cleans up (and its integrations release what they hold:
    #    a queue's quota, the last attempt's group).
    if status.phase in TERMINAL_PHASES:
        for seen in observed.integrations:
            take(seen.integration.finish(job, status, seen, now))
        take(lifecycle.clean_up_finished(job, status, list(observed.pods), mirror, now))
        take(drop_spares(observed.spares, status))
        result.delete(pod.name for pod in observed.rendezvous_stores if pod.active)
        return p

    # The restart strategy, chosen once when the spec leaves it unset: everything below reads the job as it
    # runs, with that strategy.
    take(choose_restart_strategy(job, status, observed.nodes))
    job = p.job = with_restart_strategy(job, status)

    # 2. What every live job has whatever else happens: its Service and its mirror (force-deleted first when
    #    its node is lost: the replacement is created next pass).
    if not observed.service_exists:
        result.service = render_headless_service(job)
    if job.spec.checkpointing is not None and not take(
            mirror_on_lost_node(job, mirror, observed.down_nodes, now)).force_delete:
        final_sync_done = bool(status.checkpoints and status.checkpoints.final_sync_time)
        create_mirror, delete_mirror = mirror_needs(mirror, final_sync_done)
        if create_mirror:
            result.objects_to_create = render_mirror_objects(job, settings)
        if delete_mirror and mirror is not None:
            result.delete([mirror.name])
        take(report_mirror(job, mirror))

    # 3. Pods of earlier attempts never keep running, nor linger on a node that stopped answering. (An attempt
    #    restarted in place runs in an earlier attempt's pods, in_place.py: unless it is abandoned first.)
    current = without_shed(current_pods(observed.pods, status, n), status)
    if take(abandon(job, status, current, now)).events:
        current = current_pods(observed.pods, status, n)
    lo, replaced = status.attempt_of_pods, replaced_index(status)
    older = [pod for pod in observed.pods
             if pod.attempt < lo or (pod.index in current and pod is not current[pod.index]
                                     and pod.attempt <= status.attempt)
             or (pod.index == replaced and pod.attempt < status.attempt)]
    result.delete(pod.name for pod in older if pod.active)
    forced = set(take(_force_delete_stranded(p, older)).force_delete)
    older = [pod for pod in older if pod.name not in forced]
    take(declare(job, status, current))  # an in-place attempt's pods that were not told it yet (an operator restart)
    take(rules_kept(job, current))
    take(note_first_bound(status, current, now))

    # 4. The gates before suspend: a job a queue has not admitted is held as if suspended.
    gates = [gate for seen in observed.integrations
             if (gate := seen.integration.gate(job, status, seen, observed.pods, now, settings)) is not None]
    for gate in gates:
        take(gate.decision)
    held = next((gate.hold for gate in gates if gate.hold), None)
    # 5. Suspended: nothing runs, whatever the attempt was doing; resumed: a new attempt.
    if job.spec.suspend or held:
        suspended = take(lifecycle.suspend(job, status, current, held or "spec.suspend is true"))
        take(drop_spares(observed.spares, status))
        result.delete(pod.name for pod in observed.rendezvous_stores if pod.active)
        assert suspended.verdict is not None
        take(phase_change(before, suspended.verdict))
        return p
    if status.phase == Phase.SUSPENDED:
        take(lifecycle.resume(status, current))
        current = {}

    # 6. The deadline beats everything still running.
    if status.start_time is None:
        status.start_time = rfc3339(now)
    deadline = take(lifecycle.deadline(job, status, now)).verdict
    if deadline is not None:
        return _finish(p, current, deadline)

    # 7. A restarting gang waits for its backoff (and, blocking, its old pods); a released partial gang too.
    if status.phase == Phase.RESTARTING and take(wait_for_next_attempt(job, status, older, now)).verdict:
        take(Decision(status=node_table(status, current, n)))
        return p
    waiting = take(wait_before_retry(job, status, older, now)).verdict
    if waiting is not None:
        return _report(p, current, waiting)

    # 8. The attempt's missing pods (an elastic job's rendezvous store once they are placed); then what it
    #    reports, and whether
    #    it failed (the first cause found). An elastic job's shed nodes back first: they train again.
    blocked = _create_missing(p, current, gates)
    store_failure = keep_store(p, current)
    for seen in observed.integrations:
        take(seen.integration.live_objects(job, status, seen))
    training, joining = split(current, status)
    take(grow(job, status, joining, training, now))
    training = split(current, status)[0]  # with the shed nodes that are back
    running = {i for i, pod in training.items() if pod.phase == PodPhase.RUNNING}
    take(report_progress(job, status, observed.progress, running))
    failure = take(attempt_failure(job, status, before, training, observed, now)).failure or store_failure
    if failure is not None:
        if failure.unhealthy_node:
            # Kept out of the next attempt; the node table shows the verdict while the gang restarts.
            failed = (pod for pod in current.values() if pod.phase == PodPhase.FAILED)
            take(exclude_unhealthy_nodes(job, status, failed, now))
            take(Decision(status=node_table(status, current, n)))
        return _fail_attempt(p, current, failure)
    # With a warm spare waiting, or the other ranks restarted in place without it, a node whose lease stopped
    # renewing is lost now, not when it turns NotReady.
    spare = pick_spare(observed.spares, observed.down_nodes, observed.cordoned_nodes,
                       {pod.node for pod in current.values()})
    failure = take(judge_stale_leases(job, current.values(), observed.node_leases, int(spare is not None),
                                      now, status.excluded_nodes)).failure
    if failure is not None:
        return _fail_attempt(p, current, failure)
    # InPlace: a trainer that restarted in place fails the attempt too, and the gang follows it in place, once
    # the nodes of the pods that did not restart have shown they live (lease_loss.py).
    failure = in_place_failure(status, current)
    if failure is not None:
        lease_wait = take(hold_for_leases(current.values(), observed.node_leases, now)).verdict
        if lease_wait is not None:
            return _report(p, current, lease_wait)
        return _fail_attempt(p, current, failure)
    # A node of the gang cordoned (a drain, node repair), or a user's request: a checkpoint first.
    failure = take(checkpoint_before_disruption(job, status, current, observed.cordoned_nodes, now)).failure
    if failure is not None:
        return _fail_attempt(p, current, failure)

    # 9. Not failed: stragglers (which may fail it, their node excluded already), then the judge's verdict.
    take(judge_stragglers(job, status, observed.progress, running, now))
    failure = take(straggler_failure(job, status, observed.nodes, now)).failure
    if failure is not None:
        return _fail_attempt(p, current, failure)
    elastic = take(elastic_verdict(job, status, training, now))
    if elastic.failure is not None:
        return _fail_attempt(p, current, elastic.failure)
    verdict = elastic.verdict or explain_unschedulable(job, judge(job, current), observed.nodes)
    if blocked is not None and verdict.phase == Phase.PENDING:
        verdict = blocked
    if verdict.phase in TERMINAL_PHASES:
        return _finish(p, current, verdict)
    verdict = in_place_verdict(status, current, n) or verdict
    # 10. Still going: the gang's own words, then a partial gang's release (a new attempt: no pods of its own).
    gang = ganging(status, observed.integrations)
    verdict = take(gang_verdict(job, status, training, gang, verdict)).verdict or verdict
    status.topology_domain = status.topology_domain or placed_domain(
        job, current, {node.name: node.labels for node in observed.nodes})
    verdict = take(release_partial_gang(job, status, training, now)).verdict or verdict
    if verdict.reason == Reason.PARTIAL_GANG_RELEASED:
        current = {}
    return _report(p, current, verdict)


def _force_delete_stranded(p: Pass, pods: list[ObservedPod], silent_node: str | None = None) -> Decision:
    """force_delete_stranded on the nodes that are down, and on `silent_node` (a failure's: lost by its Lease)."""
    down = p.observed.down_nodes
    if silent_node and silent_node not in down:
        down = {**down, silent_node: NodeDown(LEASE_STALE)}
    if not down:  # no set of a 20 000-pod gang's deletions built for nothing
        return Decision()
    return force_delete_stranded(pods, down, deleting=set(p.result.pods_to_delete),
                                 forcing=set(p.result.pods_to_force_delete))


def _report(p: Pass, current: dict[int, ObservedPod], verdict: Verdict) -> Pass:
    n = p.job.spec.num_nodes
    keep_spare_pool(p, verdict)
    p.status.current_nodes = sum(1 for i, pod in current.items()
                                 if pod.phase == PodPhase.RUNNING and i not in shed_indices(p.status))
    p.take(Decision(status=node_table(p.status, current, n)))
    p.take(Decision(conditions=verdict_conditions(p.status, verdict, created=len(current), num_nodes=n)))
    p.take(phase_change(p.before, verdict))
    return p


def _fail_attempt(p: Pass, current: dict[int, ObservedPod], failure: Failure) -> Pass:
    """The failure policy's answer: the gang restarting, or the job failed; or, for an elastic job whose
    node is at fault, the rest training on without it (elastic.py)."""
    if sheds(p.job, p.status, failure):
        p.take(shrink(p.job, p.status, split(current, p.status)[0], failure, p.observed.down_nodes, p.now))
        staying = without_shed(current, p.status)
        verdict = p.take(elastic_verdict(p.job, p.status, split(staying, p.status)[0], p.now)).verdict
        assert verdict is not None, "a shed node makes a verdict"
        return _report(p, staying, verdict)
    failed = p.take(apply_failure_policy(p.job, p.status, failure, current, p.now)).verdict
    if failed is None and p.status.pods_attempt is not None:  # in place: told the new attempt, where it resumes
        status = p.status
        status.attempt_start_time = rfc3339(p.now)
        status.resumed_from = resume_path(p.job, status, [], p.observed.resume_source_latest) or None
        replaced = replaced_index(status)
        staying = {i: pod for i, pod in current.items() if i != replaced}
        if replaced is not None:
            give_rank_to_spare(p, staying, replaced)
        p.take(declare(p.job, status, staying))
        p.take(_force_delete_stranded(p, [pod for i, pod in current.items() if i not in staying], failure.silent_node))
        p.take(Decision(status=node_table(status, staying, p.job.spec.num_nodes)))
        return p
    if failed is None:  # restarting: the pods on a node that is down go at once, not at its return
        p.take(_force_delete_stranded(p, list(current.values()), failure.silent_node))
        return p
    return _finish(p, current, failed)


def _create_missing(p: Pass, current: dict[int, ObservedPod], gates: list[Gate]) -> Verdict | None:
    """Render the attempt's missing pods; a Verdict when something keeps them from being created."""
    job, status, observed, now, result = p.job, p.status, p.observed, p.now, p.result
    missing, wait = due_indices(job, status, [i for i in range(job.spec.num_nodes) if i not in current], now)
    p.take(Decision(requeue_after=wait))
    if not missing or lost_indices(job_name(job), job.spec.num_nodes, p.before, current, status.attempt_of_pods,
                                   status.attempt, shed=shed_indices(status), replaced=replaced_index(status)):
        return None
    if status.pods_attempt is not None:  # restarted in place: the pod a lost or unhealthy node's took
        replace_missing(p, current, missing, gates)
        return None
    waiting = next((gate for gate in gates if gate.wait), None)
    if waiting is not None:
        p.take(Decision(requeue_after=waiting.wait_seconds))
        return Verdict(Phase.PENDING, Reason.CREATING_PODS, waiting.wait or "")
    p.take(prune_expired(status, now))
    excluded = excluded_node_names(status, now)
    p.take(Decision(status={"scheduling": choose_gang(job, status, current, observed.integrations)}))
    assert status.scheduling is not None
    gang = ganging(status, observed.integrations)
    group = status.scheduling.pod_group
    if gang is not None:
        p.take(gang.integration.attempt_objects(job, status, gang))
    handed = gang.integration.places_domain(job, status, gang) if gang is not None else False
    if handed is None:
        # The group's watch event brings the next pass, which creates the pods; the timer is there so that a
        # missed event (a watch restarted by its 410) cannot leave the job waiting for ever.
        p.take(Decision(requeue_after=GROUP_WATCH_GRACE_SECONDS))
        return Verdict(Phase.PENDING, Reason.CREATING_PODS, f"creating PodGroup {group} before the pods")
    node_selector, placed = (None, Decision()) if handed else attempt_node_selector(job, status, observed.nodes)
    if p.take(placed).verdict is not None:
        return placed.verdict
    node_selector = with_gate_selectors(node_selector, gates)
    resume = resume_path(job, status, list(current.values()), observed.resume_source_latest)
    status.resumed_from = resume or None
    status.attempt_start_time = status.attempt_start_time or rfc3339(now)
    image = pinned_image(job, status)
    attempt, name, settings = status.attempt, job_name(job), p.settings
    keys, grow_keys = PodKeys(), PodKeys()
    for seen in observed.integrations:  # the attempt's group only to the integration that gangs it
        keys = keys.then(seen.integration.pod_keys(job, attempt, group if seen is gang else None))
        grow_keys = grow_keys.then(seen.integration.pod_keys(job, attempt, None))
    # A shed index's new pod (elastic.py, grow) joins a placed gang: no native group, the gang's domain instead.
    growing, grow_selector = grow_outside_group(job, status, current, observed.nodes)
    grow_selector = with_gate_selectors(grow_selector, gates)
    result.pods_to_create = PodStream(
        missing, lambda i: pod_name(name, i, attempt),
        lambda i: render_node_pod(job, i, attempt, settings, resume_from=resume, image=image,
                                  node_selector=grow_selector if i in growing else node_selector,
                                  excluded_nodes=excluded, keys=grow_keys if i in growing else keys,
                                  restarts=status.restarts))
    if wants_disruption_budget(job):  # before the pods: a drain must never find them unguarded
        result.objects_to_create.append(render_disruption_budget(job))
    result.attempt_env = render_attempt_env(job, status.attempt, restarts=status.restarts)
    if status.attempt > 0:
        result.stale_attempt_env = attempt_env_name(job, status.attempt - 1)
    return None


def _finish(p: Pass, current: dict[int, ObservedPod], verdict: Verdict) -> Pass:
    """Succeed or fail: stop the nodes at once; with checkpointing, wait for the final sync first (requested
    once no pod of the job may write)."""
    job, status, result = p.job, p.status, p.result
    stop = tuple(pod.name for pod in current.values() if pod.active)
    p.take(Decision(stop_creating=True, delete=stop if job.spec.clean_pod_policy != CleanPodPolicy.NONE else ()))
    p.take(drop_spares(p.observed.spares, status))
    status.current_nodes = 0
    p.take(Decision(status=node_table(status, current, job.spec.num_nodes)))
    held, final_sync = hold_for_final_sync(job, status, p.before, p.now, p.observed.pods)
    p.take(final_sync)
    if held:
        return p
    p.take(Decision(delete=tuple(pod.name for pod in p.observed.rendezvous_stores if pod.active)))
    status.completion_time = rfc3339(p.now)
    status.next_attempt_time = None
    p.take(Decision(conditions=verdict_conditions(status, verdict, created=len(current),
                                                  num_nodes=job.spec.num_nodes)))
    p.take(phase_change(p.before, verdict))
    result.delete(lifecycle.finished_job_deletions(job, list(current.values()), p.observed.mirror))
    return p
