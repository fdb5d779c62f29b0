"""One reconcile of a queued job: observe (observe.py) → plan (reconcile/, pure) → apply (apply.py), run by
the workers (workers.py).

Reads come from the typed stores the watches keep current (stores.py), so a reconcile costs no GET; writes
are the plan's creates, deletes, one status patch when the status changed, and one event per phase change.
The Reconciler ties the three parts together and is what the event side talks to, through the Enqueue
interface (enqueue.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

from pydantic import ValidationError

from multinode import __version__
from multinode.api import TrainingJob, read_stored_job
from multinode.controller.apply import Applier, job_key
from multinode.controller.kube import KubeApi
from multinode.controller.observe import Observer
from multinode.controller.progress_probe import ProgressProbe
from multinode.controller.settings import OperatorSettings
from multinode.controller.status_patch import describe_validation_error
from multinode.controller.stores import JobKey, Stores
from multinode.controller.workers import Workers
from multinode.metrics.operator import OperatorMetrics
from multinode.reconcile import plan
from multinode.reconcile.follow_up import adds_nothing
from multinode.reconcile.integration import Seen
from multinode.reconcile.restart_strategy import with_restart_strategy

log = logging.getLogger("multinode.controller")

NAMESPACE_UNLISTED_RETRY_SECONDS = 2.0  # a job whose namespace is not listed yet is looked at again


class Reconciler:
    def __init__(self, kube: KubeApi, settings: OperatorSettings, stores: Stores,
                 metrics: OperatorMetrics | None = None, *, integrations: tuple[Seen, ...] = ()):
        self.kube, self.settings, self.stores = kube, settings, stores
        self.metrics = metrics or OperatorMetrics()
        self.workers = Workers(self.reconcile, settings.workers, settings.max_retry_delay_seconds, self.metrics)
        self.applier = Applier(kube, settings, self.metrics, tuple(seen.integration for seen in integrations))
        # Reads the trainers' logs of jobs with spec.hangDetection; each sweep marks its job dirty.
        self.probe = ProgressProbe(kube, stores.jobs, stores.pods, self.applier.attempt_of, self.enqueue)
        self.observer = Observer(stores, kube, self.probe, integrations)
        # Whether a namespace's objects are in the stores (handlers.py sets the namespaced watches' own
        # answer): a job planned before would have its existing pods created again.
        self.namespace_listed: Callable[[str], bool] = lambda namespace: True
        # The generation of each job (by uid) whose spec fields unknown to this version were last logged.
        self._unknown_logged: dict[str, int] = {}
        self._starting: asyncio.Task | None = None
        self._probing: asyncio.Task | None = None

    # The Enqueue interface (enqueue.py):

    def enqueue(self, key: JobKey, delay: float = 0.0) -> None:
        self.workers.queue.add(key, delay=delay)

    def forget(self, key: JobKey, uid: str | None) -> None:
        self.workers.forget(key)
        self.applier.forget(key, uid)
        self.observer.disrupted.forget(key)
        self.probe.forget(key)
        if uid:
            self._unknown_logged.pop(uid, None)

    def pod_seen(self, key: JobKey, name: str) -> None:
        self.applier.expectations.seen(key, name)

    def pod_gone(self, key: JobKey, name: str, disruption: str) -> None:
        self.observer.disrupted.remember(key, name, disruption)

    def own_status_write(self, uid: str, resource_version: str) -> bool:
        return bool(resource_version) and self.applier.written_versions.get(uid) == resource_version

    def busy(self, key: JobKey) -> bool:
        return key in self.workers.queue

    def reconciled_generation(self, uid: str) -> int | None:
        return self.applier.reconciled.get(uid)

    def start(self, after: Callable[[], Awaitable[None]] | None = None) -> None:
        """Start the workers, once `after()` is done if given (the pod and node watches' first LIST: a
        reconcile must see every pod that exists, or it would create missing ones twice)."""
        async def run() -> None:
            if after is not None:
                await after()
            self.workers.start()
            self._probing = asyncio.create_task(self.probe.run(), name="multinode-progress-probe")
        self._starting = asyncio.create_task(run(), name="multinode-workers-start")

    async def stop(self) -> None:
        tasks = [t for t in (self._starting, self._probing) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.workers.stop()
        await self.probe.stop()
        await self.applier.stop()
        await self.kube.close()

    def _log_unknown(self, job: TrainingJob, unknown: tuple[str, ...]) -> None:
        """Once per generation: fields a CRD newer than this operator accepted, which it does not apply."""
        uid, generation = job.metadata.uid or "", job.metadata.generation or 0
        if self._unknown_logged.get(uid) != generation:
            self._unknown_logged[uid] = generation
            log.warning("%s/%s: %s unknown to this operator (%s), not applied: the CRD is newer than the operator",
                        *job_key(job), ", ".join(unknown), __version__)

    async def reconcile(self, key: JobKey) -> None:
        raw = self.stores.jobs.get(key)
        if raw is None:
            return  # deleted; owner references let the garbage collector remove the rest
        if (raw.get("metadata") or {}).get("deletionTimestamp"):
            return
        if not self.namespace_listed(key[0]):
            self.enqueue(key, delay=NAMESPACE_UNLISTED_RETRY_SECONDS)
            return
        try:
            job, unknown = read_stored_job(raw)
        except ValidationError as e:
            # The CRD schema should make this unreachable; if it is reached, say so on the object.
            await self.applier.write_failure_for_invalid(raw, describe_validation_error(e))
            return
        if unknown:
            self._log_unknown(job, unknown)
        uid = job.metadata.uid or ""
        previous, version = self.applier.last_status(uid), self.applier.written_versions.get(uid)
        job = with_restart_strategy(job, previous or job.status)
        observed = await self.observer.observe(job, key)
        now = datetime.now(timezone.utc)
        result = plan(job, observed, previous=previous, now=now, settings=self.settings.render)
        try:
            result = await self.applier.apply(job, result, list(observed.pods), previous)
        finally:
            deleted = not self.stores.jobs.holds(uid)
            if deleted:
                # Forgotten (its deletion seen) while this reconcile was writing: what apply recorded of it
                # since would outlive the forget, a phase counted in multinode_trainingjobs for ever.
                self.applier.forget_uid(uid)
        if deleted:
            return
        if not result.delete_job and result.requeue_after is not None:
            self.enqueue(key, delay=result.requeue_after)
        if self.applier.written_versions.get(uid) not in (None, version) and not result.delete_job:
            # The watch's echo of this status patch reconciles nothing (own_status_write): the pass after it
            # runs only if it would add something (reconcile/follow_up.py).
            again = plan(job.model_copy(update={"status": result.status}), observed, previous=result.status,
                         now=now, settings=self.settings.render)
            if not adds_nothing(result, again):
                self.enqueue(key)
