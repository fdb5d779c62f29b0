"""A checkpoint before a planned disruption: a node of the job cordoned (the first step of `kubectl drain`,
and of node-repair flows), or `multinode checkpoint JOB` (the job's checkpoint-request annotation).

The operator opens a request in status.checkpointRequest; the mirror relays its id into a file every node
reads (mirror/loop.py); a trainer that watches the file (multinode.progress.CheckpointRequests) saves a
checkpoint at its next step. The request is answered by the first mirrored checkpoint published after it
whose step is at least the step the ranks had reported when it was made; it times out after
spec.checkpointing.beforeDisruptionSeconds. Either way, for a cordoned node the gang then restarts off the
node (NodeDrained, not counted against maxRestarts): the operator deletes the pods itself, which the job's
PodDisruptionBudget (render/disruption_budget.py) did not let the drain evict meanwhile.

Only while the attempt runs: a gang still starting has nothing to save, so a cordon then moves it at once.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime, timedelta

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.checkpointing import CheckpointRequestState, CheckpointRequestStatus, MirroredCheckpointStatus
from multinode.api.conditions import Reason
from multinode.api.constants import ANNOTATION_CHECKPOINT_REQUEST
from multinode.api.timestamps import parse_time, rfc3339
from multinode.reconcile.decision import Decision
from multinode.reconcile.failures import Failure
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import Event

# A user's request (`multinode checkpoint`) on a job whose beforeDisruptionSeconds is 0 still ends.
DEFAULT_REQUEST_SECONDS = 300
MAX_REQUEST_ID = 253
_NOT_IN_ID = re.compile(r"[^A-Za-z0-9._:+-]")


def cordoned_nodes(current: Iterable[ObservedPod], cordoned: Collection[str]) -> list[str]:
    """The nodes of the attempt's live pods that are cordoned (spec.unschedulable), sorted."""
    return sorted({p.node for p in current if p.active and p.node is not None and p.node in cordoned})


def request_id_of(job: TrainingJob) -> str:
    """The id a user asked for in the job's annotation, kept to a word (letters, digits, `._:+-`): the mirror
    writes it into a file of lines the trainers parse, so a newline in a tenant's value must not become a
    second line (the request's reason)."""
    value = (job.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) or ""
    return _NOT_IN_ID.sub("", value)[:MAX_REQUEST_ID]


def request_seconds(job: TrainingJob) -> int:
    assert job.spec.checkpointing is not None
    return job.spec.checkpointing.before_disruption_seconds or DEFAULT_REQUEST_SECONDS


def answers(request: CheckpointRequestStatus, latest: MirroredCheckpointStatus | None, now: datetime) -> bool:
    """Whether `latest` was published after the request and is of the step the ranks were at, or later."""
    if latest is None or parse_time(latest.mirrored_at, now) < parse_time(request.requested_time, now):
        return False
    return request.step is None or latest.step is None or latest.step >= request.step


def checkpoint_before_disruption(job: TrainingJob, status: TrainingJobStatus, current: Mapping[int, ObservedPod],
                                 cordoned_hosts: Collection[str], now: datetime) -> Decision:
    """Open, answer or time out the job's checkpoint request; a NodeDrained failure once a cordoned node's
    request has ended (or at once when nothing runs to save)."""
    ckpt = job.spec.checkpointing
    if ckpt is None:
        return Decision()
    pods = list(current.values())
    cordoned = cordoned_nodes(pods, cordoned_hosts) if ckpt.before_disruption_seconds > 0 else []
    request = status.checkpoint_request
    asked = request_id_of(job)
    if cordoned and status.phase != Phase.RUNNING:
        return Decision(failure=_drained(cordoned, "the gang was not running yet: nothing to save", pods))

    opened = Decision()
    if status.phase == Phase.RUNNING and (request is None or request.state != CheckpointRequestState.REQUESTED):
        if cordoned:  # a request that ended left no cordoned node behind: the node was cordoned again since
            opened = _open(status, f"a{status.attempt}-{now.strftime('%Y%m%dT%H%M%S')}", Reason.NODE_CORDONED,
                           f"node {', '.join(cordoned)} is cordoned", now)
        elif asked and (request is None or request.id != asked):
            opened = _open(status, asked, Reason.USER_REQUESTED,
                           f"annotation {ANNOTATION_CHECKPOINT_REQUEST}={asked}", now)
        request = opened.status.get("checkpoint_request", request)
    if request is None or request.state != CheckpointRequestState.REQUESTED:
        return opened

    latest = status.checkpoints.latest if status.checkpoints else None
    deadline = parse_time(request.requested_time, now) + timedelta(seconds=request_seconds(job))
    if answers(request, latest, now):
        assert latest is not None
        ended = request.model_copy(update={"state": CheckpointRequestState.MIRRORED, "checkpoint": latest.name,
                                           "done_time": rfc3339(now)})
        event = Event("Normal", Reason.CHECKPOINT_MIRRORED,
                      f"checkpoint {latest.name} (step {latest.step}) mirrored for request {request.id} "
                      f"({request.message})")
        why = f"checkpoint {latest.name} was mirrored first"
    elif now >= deadline:
        ended = request.model_copy(update={"state": CheckpointRequestState.TIMED_OUT, "done_time": rfc3339(now)})
        event = Event("Warning", Reason.CHECKPOINT_REQUEST_TIMED_OUT,
                      f"no checkpoint was mirrored within {request_seconds(job)}s of request {request.id} "
                      f"({request.message}): going on without it")
        why = f"no checkpoint was mirrored within {request_seconds(job)}s ({Reason.CHECKPOINT_REQUEST_TIMED_OUT})"
    else:
        return opened.then(Decision(requeue_after=(deadline - now).total_seconds()))
    done = opened.then(Decision(status={"checkpoint_request": ended}, events=(event,)))
    if request.reason == Reason.NODE_CORDONED and request.attempt == status.attempt and cordoned:
        return done.then(Decision(failure=_drained(cordoned, why, pods)))
    return done


def _open(status: TrainingJobStatus, request_id: str, reason: str, message: str, now: datetime) -> Decision:
    # The step the ranks reported in this attempt (hangDetection's heartbeats or log lines), if any.
    progress = status.progress
    step = progress.step if progress is not None and progress.attempt == status.attempt else None
    request = CheckpointRequestStatus(id=request_id, reason=reason, message=message, attempt=status.attempt,
                                      step=step, requested_time=rfc3339(now), state=CheckpointRequestState.REQUESTED)
    at = f" at step {step} or later" if step is not None else ""
    return Decision(status={"checkpoint_request": request},
                    events=(Event("Normal", Reason.CHECKPOINT_REQUESTED,
                                  f"checkpoint {request_id} requested{at}: {message}"),))


def _drained(cordoned: list[str], why: str, pods: list[ObservedPod]) -> Failure:
    # The index of the first cordoned node's pod: an elastic job goes on without that node (elastic.py).
    first = min((p.index for p in pods if p.node == cordoned[0]), default=None)
    return Failure(Reason.NODE_DRAINED, f"node {', '.join(cordoned)} is cordoned; {why}: the gang restarts on "
                                        "other nodes", reasons=frozenset({Reason.NODE_DRAINED}), node_loss=True,
                   index=first)
