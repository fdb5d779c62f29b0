"""What went wrong with an attempt, and what the failure policy says to do about it.

One attempt fails as a whole: the first failure found decides (a failed pod before a lost one, lowest
node index first), so the reason a user reads is the cause, not the collateral damage.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from multinode.api import TrainingJobStatus
from multinode.api.status import MAX_RESTART_HISTORY, RestartRecord
from multinode.api.conditions import Reason
from multinode.api.lifecycle import FailureAction, FailurePolicy, FailureRule
from multinode.reconcile.observe import ObservedPod
from multinode.render import pod_name
from multinode.render.spare import spare_name

# Uncounted restarts still end somewhere: a job whose nodes keep vanishing fails after this many.
MAX_UNCOUNTED_RESTARTS = 100


@dataclass(frozen=True)
class Failure:
    reason: str  # PodFailed, PreflightFailed, NodeLost, StartupTimeout, ImageDigestMismatch, Hung, Straggler
    message: str
    exit_code: int | None = None
    # Every reason a rule's onReasons may match: the container's, the pod's, the disruption's.
    reasons: frozenset[str] = frozenset()
    node_loss: bool = False
    # A node failed its health check: not the job's fault (the node is excluded, exclusion.py).
    unhealthy_node: bool = False
    # A straggler's node was excluded (stragglers.action Exclude): not the job's fault either.
    straggler: bool = False
    # A trainer that exited and whose pod restarted in place (restartStrategy InPlace): the gang follows it
    # in place instead of being recreated.
    in_place: bool = False
    # The node index whose pod is the cause, when one is (a failed, lost or evicted pod): restartStrategy
    # InPlace replaces only that pod when its node is lost or unhealthy (in_place.py).
    index: int | None = None
    # The node found lost by its stale Lease while still Ready (lease_loss.py): no kubelet will finish its pod,
    # which is force-deleted with the new attempt, as on a NotReady node (node_loss.py).
    silent_node: str | None = None


@dataclass(frozen=True)
class Ruling:
    """What the failure policy says to do with a failure, and which rule (or default) said it."""

    action: FailureAction
    why: str  # for the status message


def pod_failure(failed: list[ObservedPod]) -> Failure:
    # An unhealthy node is the cause: peers that failed beside it are collateral damage.
    p = min(failed, key=lambda pod: (not pod.unhealthy, pod.index))
    detail = f"exit code {p.exit_code}" if p.exit_code is not None else "no exit code"
    why = f", reason {p.reason}" if p.reason else ""
    words = f": {p.message}" if p.message else ""
    more = f" ({len(failed) - 1} more pods failed)" if len(failed) > 1 else ""
    reason = Reason.PREFLIGHT_FAILED if p.reason == Reason.PREFLIGHT_FAILED else Reason.POD_FAILED
    if p.unhealthy:
        reason = Reason.NODE_UNHEALTHY
    reasons = {r for r in (p.reason, p.disruption, reason) if r}
    # A pod the kubelet or a controller killed for a disruption is a lost node, not a crash.
    node_loss = p.disruption is not None or p.reason in ("Evicted", Reason.NODE_LOST, "Terminated", "Shutdown")
    where = f" on {p.node}" if p.unhealthy and p.node else ""
    return Failure(reason, f"pod {p.name} (node {p.index}){where} failed: {detail}{why}{words}{more}",
                   exit_code=p.exit_code, reasons=frozenset(reasons), node_loss=node_loss,
                   unhealthy_node=p.unhealthy, index=p.index)


# The DisruptionTarget reason the scheduler gives a pod it preempts (the whole gang, with a PodGroup).
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


def lost_failure(index: int, pod: str | None, last_reason: str | None) -> Failure:
    """A pod deleted before it finished: node loss (eviction, drain, a dead node) or, when the scheduler says
    so, preemption by a higher-priority gang. Both are uncounted (node_loss): neither is the job's fault;
    rules on `NodeLost` match both."""
    seen = f" (last seen: {last_reason})" if last_reason else ""
    reasons = frozenset({Reason.NODE_LOST, *([last_reason] if last_reason else [])})
    if last_reason == PREEMPTION_BY_SCHEDULER:
        return Failure(Reason.PREEMPTED, f"pod {pod or '?'} of node {index} was preempted by the scheduler for a "
                                         "higher-priority job; the gang restarts when it fits again",
                       reasons=reasons | {Reason.PREEMPTED}, node_loss=True, index=index)
    return Failure(Reason.NODE_LOST, f"pod {pod or '?'} of node {index} was deleted before it finished{seen}; "
                               "the gang cannot continue without it",
                   reasons=reasons, node_loss=True, index=index)


def lost_indices(job_name: str, num_nodes: int, before: TrainingJobStatus, current: dict[int, ObservedPod],
                 attempt: int, up_to: int | None = None, *, shed: Collection[int] = (),
                 replaced: int | None = None) -> list[int]:
    """Indices whose pod of this attempt was seen before and is gone now (deleted, evicted).

    A node listed in the last status says so by its row. One it left out (a job of more than
    MAX_NODE_STATUSES nodes) had a pod of this attempt when the last status counted none without one
    (nodeCounts.noPod 0). While a big gang is still being created a pod deleted unlisted is created again
    instead: its peers cannot have started training without every rank. A gang restarted in place has pods of
    the attempts `attempt` to `up_to` (a pod replaced on another node is of a later one than its peers); the
    index it `replaced` has only the newest attempt's (the row of the old pod, which failed its health check,
    stays to say why, new_attempt). An elastic job's `shed` indices go on without a pod (elastic.py): not
    lost."""
    known = {ns.index: ns.pod for ns in before.node_statuses if ns.phase}
    counts = before.node_counts
    all_seen = (before.attempt_of_pods == attempt and before.node_statuses_omitted > 0 and counts is not None
                and counts.no_pod == 0)
    listed = {ns.index for ns in before.node_statuses}
    attempts = range(attempt, (attempt if up_to is None else up_to) + 1)
    same_pods = before.attempt_of_pods == attempt  # a spare's name carries no attempt: its row must be this gang's
    newest = attempts[-1:]
    return [i for i in range(num_nodes) if i not in current and i not in shed
            and (any(known.get(i) == pod_name(job_name, i, a) for a in (newest if i == replaced else attempts))
                 or (same_pods and _a_spare(job_name, known.get(i))) or (all_seen and i not in listed))]


def _a_spare(job_name: str, pod: str | None) -> bool:
    """Whether `pod` is the name of one of the job's hot spares (render/spare.py)."""
    prefix = spare_name(job_name, 0)[:-1]
    return pod is not None and pod.startswith(prefix) and pod[len(prefix):].isdigit()


def _matches(rule: FailureRule, failure: Failure) -> bool:
    if rule.on_exit_codes is not None and not (
        failure.exit_code is not None and any(r.min <= failure.exit_code <= r.max for r in rule.on_exit_codes)
    ):
        return False
    if rule.on_reasons is not None and not failure.reasons & set(rule.on_reasons):
        return False
    if rule.on_node_loss is not None and rule.on_node_loss != failure.node_loss:
        return False
    return True


def rule_on(policy: FailurePolicy, failure: Failure) -> Ruling:
    """User rules first, in order; then the defaults: node loss and an unhealthy node restart without
    counting, the rest counts."""
    for i, rule in enumerate(policy.rules or []):
        if _matches(rule, failure):
            return Ruling(rule.action, f"failurePolicy.rules[{i}]")
    if failure.node_loss:
        return Ruling(FailureAction.RESTART_WITHOUT_COUNTING, "default: node loss restarts without counting")
    if failure.unhealthy_node:
        return Ruling(FailureAction.RESTART_WITHOUT_COUNTING,
                        "default: an unhealthy node is excluded and the gang restarts elsewhere without counting")
    if failure.straggler:
        return Ruling(FailureAction.RESTART_WITHOUT_COUNTING,
                        "default: a straggler's node is excluded and the gang restarts without it, not counted")
    return Ruling(FailureAction.RESTART, "default: failures restart, counted")


def restart_history_with(status: TrainingJobStatus, record: RestartRecord) -> list[RestartRecord]:
    """status.restartHistory with `record` added: the newest MAX_RESTART_HISTORY entries."""
    return [*status.restart_history, record][-MAX_RESTART_HISTORY:]
