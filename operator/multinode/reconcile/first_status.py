"""A new job's first status waits for its pods, at most FIRST_STATUS_WAIT_SECONDS.

The pass that creates a new job's pods has not seen them yet: the status it would write says "0/N pods
created", and the pods' own watch events bring the next pass, which writes the status again a moment later
(Created, each node's row). On a busy cluster that first write was a wasted request of every job's start,
and not a cheap one: a TrainingJob status write costs kube-apiserver about 16 ms of CPU
(tools/bench/status_write.py; docs/benchmarks.md, throughput). So that pass holds its status, and the
Events that go with it, and the next pass writes them: the one the pods' events bring, or the one a timer
brings when the wait is up, whichever comes first. Kubernetes' Job controller batches a job's pod events
for a second for the same reason (its SyncJobBatchPeriod).

Only the first attempt's first status waits, and only when nothing has to come after it: a restarted
attempt's status declares the attempt its pods are told (in_place.py), and a queue's admission writes
spec.suspend only after the status that says so.
"""

from __future__ import annotations

from multinode.api import TrainingJobStatus
from multinode.api.status import TERMINAL_PHASES
from multinode.reconcile.outcome import Plan

FIRST_STATUS_WAIT_SECONDS = 1.0


def first_status_waits(result: Plan, *, on_server: TrainingJobStatus | None, written: bool) -> bool:
    """Whether this pass's status may wait for the next pass: the job has no status yet (on the server or
    written by this operator), and this pass creates the first attempt's pods and needs nothing written
    after the status."""
    status = result.status
    return (not written and (on_server is None or on_server.phase is None)
            and status.attempt == 0 and status.restarts + status.uncounted_restarts == 0
            and status.phase not in TERMINAL_PHASES and len(result.pods_to_create) > 0
            and not result.pods_to_annotate and result.job_suspend is None and not result.delete_job)
