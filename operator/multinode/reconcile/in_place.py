"""In-place gang restarts (failurePolicy.restartStrategy InPlace; the pods' side is render/in_place.py).

A trainer that exits with a code no failure policy rule names restarts its whole pod in place (the kubelet's
RestartAllContainers): same pod, same node, preflight first. The operator sees the trainer's restart count
pass what the pod's annotation expects, and declares the next attempt: counted as any restart (restarts,
restartHistory, maxRestarts), but the pods stay, and the new attempt's values (attempt, resume path, restart
count) are written into every pod's annotations, where the restarted trainers read them. The peers' trainers
exit when their collectives fail and follow through their own restart rule; preflight holds each restarted
pod until its annotations name the new attempt.

Each pod's annotations also say which trainer restart count it has once it runs the declared attempt: the
count it had, plus one if it had not restarted yet. A count past that is a new failure. Everything is read
from the pods and the status, so an operator restarted halfway through carries on.

The recreate of today is the fallback. A pod that fails (preflight, an exit code a rule names) or is lost
(attempt_failures.py) ends the attempt as in any job: the next one is recreated in new pods. Pods that have
not restarted within IN_PLACE_TIMEOUT_SECONDS (a trainer hung in a collective never exits), or a pod missing
that no status row saw go, recreate the gang as the same attempt, in new pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.status import RestartRecord
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.failures import Failure, restart_history_with
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.outcome import Event, Verdict
from multinode.reconcile.spares import promised_spare
from multinode.render.in_place import in_place_annotations, restarts_in_place, trainer_restart_rules
from multinode.render.names import leader_dns_name

# From the new attempt's declaration until every pod has restarted into it; past it the gang is recreated.
IN_PLACE_TIMEOUT_SECONDS = 120.0

# The kubelet's reason on a container it removed to restart every container of the pod in place.
RESTARTING_ALL_CONTAINERS = "RestartingAllContainers"


def current_pods(pods: Iterable[ObservedPod], status: TrainingJobStatus, n: int) -> dict[int, ObservedPod]:
    """The current attempt's pods, by node index: the pods made for it; or, restarted in place, the pods made
    for the attempts since status.podsAttempt, the newest of each index (a pod replaced on another node is of
    a later attempt than its peers), but for the old pod of the node the attempt replaces."""
    lo, hi, replaced = status.attempt_of_pods, status.attempt, replaced_index(status)
    if lo == hi:  # a spare that took a rank in place is never a pod of a gang recreated in new pods
        return {pod.index: pod for pod in pods if pod.attempt == hi and pod.index < n and pod.spare is None}
    current: dict[int, ObservedPod] = {}
    for pod in pods:
        if not lo <= pod.attempt <= hi or pod.index >= n or (pod.index == replaced and pod.attempt < hi):
            continue
        if pod.index not in current or pod.attempt > current[pod.index].attempt:
            current[pod.index] = pod
    return current


def in_place_failure(status: TrainingJobStatus, current: dict[int, ObservedPod]) -> Failure | None:
    """A pod of the current attempt whose trainer restarted in place after it started the attempt. Read from
    the pods (their restart rule and annotations), not the spec: a job switched away from InPlace while it
    runs still has pods that restart in place, and they must not wait at their barrier for ever."""
    restarted = [p for p in current.values()
                 if p.in_place_attempt == status.attempt and p.restarted_undeclared]
    if not restarted:
        return None
    p = min(restarted, key=lambda pod: pod.index)
    more = f" ({len(restarted) - 1} more pods too)" if len(restarted) > 1 else ""
    return Failure(Reason.POD_FAILED, f"pod {p.name} (node {p.index}): its trainer exited with a code no failure "
                                      f"policy rule names, and the pod restarted in place{more}",
                   reasons=frozenset({Reason.POD_FAILED, RESTARTING_ALL_CONTAINERS}), in_place=True)


FINISHED = (PodPhase.SUCCEEDED, PodPhase.FAILED)

# The failures whose one pod is replaced while the rest of the gang restarts in place: its node is gone or
# failed its health check, the others are fine. (Preemption takes the whole gang; a drain moves it.)
REPLACED_FOR = (Reason.NODE_LOST, Reason.NODE_UNHEALTHY)


def replaces_one_pod(job: TrainingJob, failure: Failure, current: Mapping[int, ObservedPod]) -> bool:
    """Whether the failure policy's restart replaces only the failure's pod (restartStrategy InPlace): its
    node is lost or unhealthy, and every other pod can restart in place. One whose trainer has finished
    (Succeeded, or Failed: a trainer that ran ahead without its peers, a health check's collateral) never
    restarts again, so the gang is recreated instead."""
    return (restarts_in_place(job) and not failure.in_place and failure.index is not None
            and failure.reason in REPLACED_FOR
            and not any(p.phase in FINISHED for i, p in current.items() if i != failure.index))


def replaced_index(status: TrainingJobStatus) -> int | None:
    """The node whose pod the current in-place attempt replaces (its last restart record says which)."""
    if status.pods_attempt is None or not status.restart_history:
        return None
    record = status.restart_history[-1]
    if record.attempt != status.attempt - 1 or record.reason not in REPLACED_FOR:
        return None
    return record.index


def _expected_restarts(pod: ObservedPod) -> int:
    """The trainer restart count `pod` has once it runs a newly declared attempt."""
    return pod.trainer_restarts if pod.restarted_undeclared else pod.trainer_restarts + 1


def leader(job: TrainingJob, status: TrainingJobStatus, current: dict[int, ObservedPod]) -> str:
    """Rank 0's DNS name in the current attempt: node 0's, or the hot spare's that holds (or is taking) its
    rank (spares.py)."""
    pod = current.get(0)
    if pod is not None:
        return leader_dns_name(job, pod.spare)
    return leader_dns_name(job, promised_spare(status, 0))


def declare(job: TrainingJob, status: TrainingJobStatus, current: dict[int, ObservedPod]) -> Decision:
    """Write the current attempt into the pods that do not name it yet (all of them, the pass an in-place
    restart is declared; the rest, after an operator restart in between)."""
    if status.pods_attempt is None:
        return Decision()
    resume, rank0 = status.resumed_from or "", leader(job, status, current)
    return Decision(annotate=tuple(
        (p.name, in_place_annotations(job, status.attempt, resume, status.restarts, _expected_restarts(p), rank0))
        for p in sorted(current.values(), key=lambda pod: pod.index)
        if p.in_place_attempt != status.attempt and not p.terminating))


def _not_back(status: TrainingJobStatus, current: dict[int, ObservedPod]) -> list[ObservedPod]:
    return [p for p in current.values()
            if p.in_place_attempt != status.attempt or p.trainer_restarts < p.in_place_trainer_restarts]


def abandon(job: TrainingJob, status: TrainingJobStatus, current: dict[int, ObservedPod], now: datetime) -> Decision:
    """Recreate the gang (as the same attempt, in new pods) when pods have not restarted into an in-place
    attempt within IN_PLACE_TIMEOUT_SECONDS (a trainer hung in a collective never exits), or at once when one
    of them finished instead (Succeeded: a trainer that exited 0 never restarts)."""
    if status.pods_attempt is None or status.phase in (Phase.SUCCEEDED, Phase.FAILED):
        return Decision()
    n = job.spec.num_nodes
    since = parse_time(status.attempt_start_time, now) if status.attempt_start_time else now
    waiting = (now - since).total_seconds()
    late = _not_back(status, current)
    if not late:
        return Decision()
    finished = [p for p in late if p.phase == PodPhase.SUCCEEDED]
    if finished:
        first = min(finished, key=lambda p: p.index).name
        return recreate(status, current, f"pod {first} finished (Succeeded) instead of restarting into attempt "
                                         f"{status.attempt}: a trainer that exits 0 does not restart", now)
    if waiting < IN_PLACE_TIMEOUT_SECONDS:
        return Decision(requeue_after=IN_PLACE_TIMEOUT_SECONDS - waiting)
    return recreate(status, current, f"{len(late)} of {n} pods did not restart into attempt {status.attempt} "
                                     f"within {IN_PLACE_TIMEOUT_SECONDS:.0f}s "
                                     f"(first: {min(late, key=lambda p: p.index).name})", now)


def recreate(status: TrainingJobStatus, current: dict[int, ObservedPod], why: str, now: datetime) -> Decision:
    """The in-place attempt goes on in new pods (the old ones are an earlier attempt's now, and go).

    When a pod was made for this attempt on another node, in place of a lost or unhealthy one's, the gang goes
    on as the next attempt instead, not counted: that pod bears this attempt's name but reads the earlier
    attempt's shared env (its ConfigMap, deleted with that attempt), so it could never start in the new gang,
    and as a pod of an earlier attempt it goes with the others (a pod of this attempt that vanished would read
    as its node lost)."""
    message = f"in-place restart of attempt {status.attempt} abandoned: {why}; recreating the gang"
    edits: dict[str, Any] = {"phase": Phase.RESTARTING, "pods_attempt": None, "attempt_start_time": None,
                             "attempt_scheduled_time": None, "node_statuses": [], "node_counts": None,
                             "resumed_from": None}
    replaced = replaced_index(status)
    replacement = current.get(replaced) if replaced is not None else None
    if replacement is not None and replacement.attempt == status.attempt:
        message += f" as attempt {status.attempt + 1} (pod {replacement.name} was made for this one)"
        record = RestartRecord(attempt=status.attempt, reason=Reason.IN_PLACE_RESTART_ABANDONED,
                               message=message[:4096], counted=False, time=rfc3339(now), index=replaced)
        edits |= {"attempt": status.attempt + 1, "uncounted_restarts": status.uncounted_restarts + 1,
                  "restart_history": restart_history_with(status, record)}
    return Decision(status=edits, events=(Event("Warning", Reason.IN_PLACE_RESTART_ABANDONED, message),),
                    conditions=(SetCondition(ConditionType.RUNNING, "False", Reason.IN_PLACE_RESTART_ABANDONED,
                                             message),))


def rules_kept(job: TrainingJob, current: dict[int, ObservedPod]) -> Decision:
    """InPlaceRestarts: whether the attempt's pods kept the trainer's restart rule. An apiserver without
    Kubernetes 1.36's container restart rules (or with their feature gates off) drops the field: the pods are
    created, and every failure recreates the gang, which the condition says."""
    if not restarts_in_place(job) or not current or not trainer_restart_rules(job):
        return Decision()
    dropped = [p for p in current.values() if not p.restart_rules]
    if dropped:
        return Decision(conditions=(SetCondition(
            ConditionType.IN_PLACE_RESTARTS, "False", Reason.RESTART_RULES_DROPPED,
            f"the apiserver dropped the trainer's restartPolicyRules from {len(dropped)} of {len(current)} pods "
            f"(first: {min(dropped, key=lambda p: p.index).name}): it serves no container restart rules "
            "(Kubernetes 1.36, feature gates ContainerRestartRules and RestartAllContainersOnContainerExits); a "
            "failure recreates the gang, as BlockingRecreate"),))
    return Decision(conditions=(SetCondition(
        ConditionType.IN_PLACE_RESTARTS, "True", Reason.RESTART_RULES_KEPT,
        "the pods carry their restart rules: a trainer that exits restarts the gang in place"),))


def in_place_verdict(status: TrainingJobStatus, current: dict[int, ObservedPod], n: int) -> Verdict | None:
    """Restarting, while pods of an in-place attempt have not restarted into it yet."""
    if status.pods_attempt is None:
        return None
    late = len(_not_back(status, current)) + n - len(current)  # a replaced pod not made yet counts too
    if not late:
        return None
    return Verdict(Phase.RESTARTING, Reason.RESTARTING_IN_PLACE,
                   f"attempt {status.attempt} restarting in place: {n - late} of {n} pods restarted")
