"""Whether the current attempt failed, and why: the detectors in order of precedence, the first failure found
being the attempt's cause.

Why this order: a pod that failed is the cause, and the peers it takes down with it are collateral damage,
so failed pods come first. A pod deleted between two passes, one someone else is deleting (an eviction, a
drain) and one on a node that stopped answering say the node was lost: none of these counts once the leader
succeeded under LeaderOnly (the job has succeeded). Then pods running different images (only among running
pods, so after the ones that are gone), then the startup timeout (what is left of an attempt that has not
failed otherwise), and last a hang (a gang that runs, but whose ranks stopped progressing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.reconcile.decision import Decision
from multinode.reconcile.elastic import shed_indices
from multinode.reconcile.failures import lost_failure, lost_indices, pod_failure
from multinode.reconcile.hang import judge_hang
from multinode.reconcile.in_place import replaced_index
from multinode.reconcile.image_consistency import judge_digests
from multinode.reconcile.node_loss import evicted_failure, judge_down_nodes
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.observed import Observed
from multinode.reconcile.startup import startup_timeout
from multinode.reconcile.success import judge, leader_succeeded
from multinode.render.names import job_name, pod_name


@dataclass(frozen=True)
class Attempt:
    """What the detectors read: the job, the status so far this pass, the last one written, the attempt's
    pods by index, what was observed, and the time."""

    job: TrainingJob
    status: TrainingJobStatus
    before: TrainingJobStatus
    current: dict[int, ObservedPod]
    observed: Observed
    now: datetime

    @property
    def leader_done(self) -> bool:
        return leader_succeeded(self.job, self.current)


def failed_pod(a: Attempt) -> Decision:
    # A pod we are deleting may report Failed on its way out (SIGTERM); that is not its failure.
    failed = [p for p in a.current.values() if p.phase == PodPhase.FAILED and not p.terminating]
    return Decision(failure=pod_failure(failed)) if failed and not a.leader_done else Decision()


def lost_pod(a: Attempt) -> Decision:
    name = job_name(a.job)
    lost = lost_indices(name, a.job.spec.num_nodes, a.before, a.current, a.status.attempt_of_pods, a.status.attempt,
                        shed=shed_indices(a.status), replaced=replaced_index(a.status))
    if not lost or a.leader_done:
        return Decision()
    last = next((ns for ns in a.before.node_statuses if ns.index == lost[0]), None)
    # A pod deleted between two passes says why only in its last watch event (preemption, eviction).
    gone = (a.observed.gone_disruptions.get(pod_name(name, i, a.status.attempt_of_pods)) for i in lost)
    why = next((g for g in gone if g), None) or (last.reason if last else None)
    pod = last.pod if last else pod_name(name, lost[0], a.status.attempt_of_pods)
    return Decision(failure=lost_failure(lost[0], pod, why))


def evicted_pod(a: Attempt) -> Decision:
    evicted = evicted_failure(a.current.values())
    return Decision(failure=evicted) if evicted is not None and not a.leader_done else Decision()


def pod_on_down_node(a: Attempt) -> Decision:
    return Decision() if a.leader_done else judge_down_nodes(a.job, a.current.values(), a.observed.down_nodes, a.now)


def image_digests(a: Attempt) -> Decision:
    return judge_digests(a.job, a.status, a.current)


def startup(a: Attempt) -> Decision:
    if shed_indices(a.status):  # an elastic job without some nodes: elastic.py bounds the wait below minNodes
        return Decision()
    return startup_timeout(a.job, a.status, a.current, a.now, why_not_running=lambda: judge(a.job, a.current).message)


def hang(a: Attempt) -> Decision:
    return judge_hang(a.job, a.status, a.current, a.observed.progress, a.now)


# In order of precedence (the module's docstring says why); the detectors after the first failure do not run.
ATTEMPT_FAILURES: tuple[Callable[[Attempt], Decision], ...] = (
    failed_pod, lost_pod, evicted_pod, pod_on_down_node, image_digests, startup, hang)


def attempt_failure(job: TrainingJob, status: TrainingJobStatus, before: TrainingJobStatus,
                    current: dict[int, ObservedPod], observed: Observed, now: datetime) -> Decision:
    """The detectors' decisions, in order, up to the first that finds a failure (its `failure`, if any).
    None of them reads what another one sets, so they are combined rather than folded one by one."""
    attempt = Attempt(job, status, before, current, observed, now)
    decided = Decision()
    for detect in ATTEMPT_FAILURES:
        decided = decided.then(detect(attempt))
        if decided.failure is not None:
            break
    return decided
