"""A lost event never means a lost job: the TrainingJobs are listed again every `resync_seconds`, and any job
the operator has not reconciled at its current generation is reconciled.

Events are the fast path (kopf's TrainingJob watch, handlers.py); this is the safety net under it. A job is
*found* when a LIST shows it with no status or a status older than its generation while the operator has
neither reconciled that generation nor has it waiting in its queue, on two LISTs in a row: the first could
race the watch event of a job created a moment before it, the second cannot (only one clock, ours, is
compared). A found job is filed into the job index if the index lacks it, and queued. A job the index holds
that two LISTs in a row did not return, and that a GET says is gone, is forgotten (its DELETED event was
lost). Each find counts in `multinode_jobs_found_by_resync_total{reason}`, and the operator logs it: any
value above zero means events were lost, which the alert MultinodeJobEventsLost reports
(docs/operations.md).

Cost: one paged LIST of TrainingJobs per followed namespace (or one cluster-wide) per period.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from multinode.controller.enqueue import ResyncTarget
from multinode.controller.kube import ApiError, KubeApi
from multinode.controller.stores import JobKey, JobStore
from multinode.metrics.operator import OperatorMetrics

log = logging.getLogger("multinode.controller.resync")

# Why a job was found: not in the index at all; in it but never reconciled at its generation; gone from the
# apiserver but still in the index.
MISSING, UNRECONCILED, DELETED = "Missing", "Unreconciled", "Deleted"


def stale(job: Mapping[str, Any]) -> bool:
    """No status yet, or one written for an older generation of the spec."""
    status = job.get("status") or {}
    generation = (job.get("metadata") or {}).get("generation")
    return not status or status.get("observedGeneration") != generation


class JobResync:
    def __init__(self, kube: KubeApi, namespaces: Callable[[], list[str | None]], jobs: JobStore,
                 r: ResyncTarget, metrics: OperatorMetrics, period_seconds: float):
        self.kube, self.namespaces, self.jobs, self.r = kube, namespaces, jobs, r
        self.metrics, self.period = metrics, period_seconds
        self._suspects: dict[tuple[str, int | None], str] = {}  # (uid, generation) → why, from the last pass
        self._absent: set[str] = set()  # uids in the index that the last pass did not list
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="multinode-job-resync")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            try:
                await self.resync()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the safety net must outlive any one failed pass
                log.warning("re-list of TrainingJobs failed, next in %.0f s: %s", self.period,
                            e.message if isinstance(e, ApiError) else repr(e))

    async def resync(self) -> list[tuple[JobKey, str]]:
        """One pass: list, compare, act on the jobs suspected twice in a row; what it found, and why."""
        listed: dict[str, dict] = {}
        for namespace in self.namespaces():
            for job in await self.kube.list_jobs(namespace):
                listed[job["metadata"]["uid"]] = job
        found = self._compare(listed) + await self._gone(listed)
        self.metrics.job_relists.inc()
        for (key, why) in found:
            self.metrics.jobs_found_by_resync.labels(reason=why).inc()
            log.warning("TrainingJob %s/%s found by the periodic re-list (%s): a watch event was lost",
                        key[0], key[1], why)
        return found

    def _compare(self, listed: dict[str, dict]) -> list[tuple[JobKey, str]]:
        suspects: dict[tuple[str, int | None], str] = {}
        found = []
        for uid, job in listed.items():
            meta = job["metadata"]
            key: JobKey = (meta["namespace"], meta["name"])
            generation = meta.get("generation")
            if not self.jobs.holds(uid):
                why = MISSING
            elif stale(job) and not self.r.busy(key) and self.r.reconciled_generation(uid) != generation:
                why = UNRECONCILED
            else:
                continue
            if self._suspects.get((uid, generation)) is None:
                suspects[(uid, generation)] = why
                continue
            if why == MISSING:
                self.jobs.file(job)
            self.r.enqueue(key)
            found.append((key, why))
        self._suspects = suspects
        return found

    async def _gone(self, listed: dict[str, dict]) -> list[tuple[JobKey, str]]:
        """Jobs the index holds in the namespaces listed, absent from two LISTs in a row and confirmed gone."""
        followed = set(self.namespaces())
        absent = {uid for uid, key in self.jobs.uids()
                  if uid not in listed and (None in followed or key[0] in followed)}
        found = []
        for uid in absent & self._absent:
            key = self.jobs.key_of(uid)
            if key is None:
                continue
            if await self.kube.get_job_uid(*key) == uid:
                continue  # still there: the LIST raced its creation
            self.jobs.remove(uid)
            self.r.forget(key, uid)
            found.append((key, DELETED))
        self._absent = absent
        return found
