"""Apply: the only place that turns a Plan into API calls.

In order: the Plan's objects (the Service, the mirror's identity, the mirror, the attempt's PodGroup) and,
alongside them, the attempt's ConfigMap; the pods (as a stream, minus those created moments ago: the
expectations); the deletes (the integrations' objects' too), their status writes, the stale gang groups; one
status patch when the status changed (a new job's first waits for its pods: reconcile/first_status.py) and,
after it in a task of its own, one event per phase change; then spec.suspend and the job's own deletion. A
refused create is judged in reconcile/ (refusals.py): a refusal that fails the job is written and not
retried; one the cluster may lift is said on the job's status and raised for the worker's retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.goodput import LostCause
from multinode.api.timestamps import parse_time
from multinode.controller.attempt_env import AttemptEnvs
from multinode.controller.creates import create_stream
from multinode.controller.kube import ApiError, KubeApi
from multinode.controller.ownership import ForeignObject, claim_existing, create_or_claim
from multinode.controller.settings import OperatorSettings
from multinode.controller.status_patch import dump_status, status_patch
from multinode.controller.stores import JobKey
from multinode.metrics.operator import JobFigures, OperatorMetrics
from multinode.reconcile import Event, ObservedPod, Plan
from multinode.reconcile.first_status import first_status_waits
from multinode.reconcile.integration import Integration
from multinode.reconcile.outcome import only_named, pod_names
from multinode.reconcile.refusals import counts_as_created, creation_refused, foreign_object_found
from multinode.reconcile.stale_groups import stale_gang_groups
from multinode.reconcile.status_report import mark_failed

log = logging.getLogger("multinode.controller")

# How long a pod this operator created is trusted to exist before the pod store shows it (client-go's
# "expectations"): until then a reconcile would see it missing and create it again, only to get 409.
EXPECTATION_TTL_SECONDS = 30.0


def job_key(job: TrainingJob) -> JobKey:
    """(namespace, name) of a job read from the apiserver, which sets both."""
    namespace, name = job.metadata.namespace, job.metadata.name
    assert namespace is not None and name is not None, "a stored TrainingJob has a namespace and a name"
    return namespace, name


def _pod_named(name: str) -> dict[str, Any]:
    """What reading pod `name` back needs to know of it."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}}


def _exists(error: BaseException) -> bool:
    """A create refused because the object is already there (see reconcile/refusals.py)."""
    return isinstance(error, ApiError) and counts_as_created(error.status)


def _created(status: TrainingJobStatus) -> bool:
    return any(c.type == ConditionType.CREATED and c.status == "True" for c in status.conditions)


def _age_seconds(job: TrainingJob) -> float | None:
    created = job.metadata.creation_timestamp
    if not created:
        return None
    now = datetime.now(timezone.utc)
    return (now - parse_time(str(created), now)).total_seconds()


class Expectations:
    """Pods created (or found existing, 409) but not seen by the pod store yet, per job: name → when."""

    def __init__(self) -> None:
        self.by_job: dict[JobKey, dict[str, float]] = {}

    def seen(self, key: JobKey, name: str) -> None:
        """A watch event of pod `name`: the store has it (or its deletion), so stop expecting it."""
        expected = self.by_job.get(key)
        if expected is not None:
            expected.pop(name, None)
            if not expected:
                del self.by_job[key]

    def not_expected(self, key: JobKey, names: list[str], indexed: set[str]) -> set[str]:
        """A plan's pod names minus those this operator created moments ago (the store lags its creates)."""
        expected = self.by_job.get(key)
        if not expected:
            return set(names)
        now = time.monotonic()
        for name, since in list(expected.items()):
            # In the store (its watch event beat our create's response), or too old (never seen: lost).
            if name in indexed or now - since > EXPECTATION_TTL_SECONDS:
                del expected[name]
        return {name for name in names if name not in expected}

    def created(self, key: JobKey, names: list[str]) -> None:
        expected, now = self.by_job.setdefault(key, {}), time.monotonic()
        expected.update((name, now) for name in names)
        if not expected:
            del self.by_job[key]

    def forget(self, key: JobKey) -> None:
        self.by_job.pop(key, None)


@dataclass
class HeldStatus:
    """A new job's first status and its Events, not written yet (reconcile/first_status.py); written by the
    next pass, at the latest one at `until` (time.monotonic())."""
    status: TrainingJobStatus
    events: list[Event]
    until: float


class Applier:
    def __init__(self, kube: KubeApi, settings: OperatorSettings, metrics: OperatorMetrics,
                 integrations: tuple[Integration, ...] = ()):
        self.kube, self.settings, self.metrics = kube, settings, metrics
        self.integrations = integrations  # which read a refused create of their objects (refusals.py)
        self.expectations = Expectations()
        self.attempt_envs = AttemptEnvs(kube)
        # The last status this operator wrote, per job uid. The store can lag behind our own write by
        # one watch event; the operator is the only writer of these fields, so its copy is the newest.
        self.written: dict[str, TrainingJobStatus] = {}
        # The resourceVersion our last status patch of each job (by uid) gave it: that version's watch event
        # is our own write coming back, news to nobody (Reconciler.own_status_write).
        self.written_versions: dict[str, str] = {}
        self.held: dict[str, HeldStatus] = {}  # by uid: first statuses waiting for their pods
        # Phase of every job this operator has reconciled, by uid: multinode_trainingjobs{phase}.
        self.phases: dict[str, str] = {}
        # Goodput and step of every job, by uid, from the status last written: multinode_trainingjob_*.
        self.figures: dict[str, JobFigures] = {}
        # The generation each job (by uid) was last planned at: what the periodic re-list (resync.py) checks
        # a job's status against before it calls the job missed.
        self.reconciled: dict[str, int | None] = {}
        self.posting: set[asyncio.Task] = set()  # Events being posted (_write_status)

    def forget(self, key: JobKey, uid: str | None) -> None:
        self.expectations.forget(key)
        self.attempt_envs.forget(key)
        if uid:
            self.forget_uid(uid)

    def forget_uid(self, uid: str) -> None:
        """What was recorded of one job by uid (not its name's: a new job of the same name may hold that)."""
        for by_uid in (self.written, self.written_versions, self.held, self.phases, self.figures, self.reconciled):
            by_uid.pop(uid, None)

    def last_status(self, uid: str) -> TrainingJobStatus | None:
        """The status a job's next pass starts from: the one this operator wrote last, else one it holds."""
        held = self.held.get(uid)
        return self.written.get(uid) or (held.status if held is not None else None)

    def attempt_of(self, raw: Mapping[str, Any]) -> int:
        """The job's current attempt: the status this operator wrote last, else the object's."""
        written = self.written.get((raw.get("metadata") or {}).get("uid") or "")
        return written.attempt if written is not None else int((raw.get("status") or {}).get("attempt") or 0)

    async def apply(self, job: TrainingJob, result: Plan, pods: list[ObservedPod],
                    previous: TrainingJobStatus | None) -> Plan:
        """Make `result` so; the Plan as applied (a refusal may have changed its status). Raises what the
        worker should retry."""
        try:
            await self._create(job, result, {p.name for p in pods})
        except ForeignObject as e:
            result = foreign_object_found(job, result, e.message, now=datetime.now(timezone.utc)).plan or result
            await self._write_status(job, previous or job.status, result)  # say why before the retry
            raise
        except ApiError as e:
            refused = creation_refused(job, result, pods, e.status, e.message, now=datetime.now(timezone.utc),
                                       api_version=e.api_version, integrations=self.integrations)
            if refused.plan is not None:
                result = refused.plan
                if refused.retry:  # say why on the job before the retry
                    await self._write_status(job, previous or job.status, result)
            if refused.retry:
                raise
        namespace, name = job_key(job)
        await asyncio.gather(*(self.kube.delete_pod(namespace, pod) for pod in result.pods_to_delete),
                             *(self.kube.delete_pod(namespace, pod, force=True) for pod in result.pods_to_force_delete),
                             *(self.kube.delete_object(namespace, o.kind, o.name) for o in result.objects_to_delete))
        for write in result.status_writes:
            await self.kube.patch_object_status(namespace, write)
        for prune in result.objects_to_prune:  # after the attempt's own group was made (_create)
            groups = await self.kube.list_job_objects(namespace, prune.kind, prune.job)
            for group in stale_gang_groups(groups, prune.attempt, job.metadata.uid or ""):
                await self.kube.delete_object(namespace, prune.kind, group)
        if not self._hold_first_status(job, result):
            await self._write_status(job, previous or job.status, result)
        # After the status that declares the attempt they name: a pod told an attempt the status does not
        # have yet would restart into it unseen (reconcile/in_place.py declares again what did not land).
        await asyncio.gather(*(self.kube.patch_pod_annotations(namespace, pod, annotations)
                               for pod, annotations in result.pods_to_annotate.items()))
        if result.job_suspend is not None and result.job_suspend != job.spec.suspend:
            # A queue admitted (false) or evicted (true) the job: after the status that says so.
            await self.kube.patch_job_suspend(namespace, name, result.job_suspend)
        await self._create_spares(job, result)
        self.reconciled[job.metadata.uid or ""] = job.metadata.generation
        if result.delete_job:
            await self.kube.delete_job(namespace, name)
        return result

    async def _create_spares(self, job: TrainingJob, result: Plan) -> None:
        """The hot spares, last; a refusal (a quota, a cluster without image volumes) is logged, and the next
        pass tries again: the gang runs without them, and nothing it needed waited for them."""
        namespace, uid = job.metadata.namespace or "", job.metadata.uid or ""
        for spare in result.spares_to_create:
            try:
                await create_or_claim(self.kube, namespace, spare, uid)
            except (ApiError, ForeignObject) as e:
                log.warning("hot spare %s/%s not created: %s", namespace, spare["metadata"]["name"], e)

    async def _create(self, job: TrainingJob, result: Plan, indexed: set[str]) -> None:
        key = job_key(job)
        namespace, uid = key[0], job.metadata.uid or ""
        wanted = self.expectations.not_expected(key, pod_names(result.pods_to_create), indexed)

        async def objects() -> None:
            for obj in ([result.service] if result.service is not None else []) + result.objects_to_create:
                # In order: the Service, the mirror's identity, the mirror, the attempt's PodGroup (before its pods).
                await create_or_claim(self.kube, namespace, obj, uid)

        async def attempt_env() -> None:
            if wanted and result.attempt_env is not None:
                await self.attempt_envs.ensure(namespace, key, result.attempt_env, result.stale_attempt_env, uid)

        # Both before the pods; the attempt's ConfigMap needs none of the other objects, so it is made alongside
        # them: a new job's first pod waits one round trip less. Each is waited for before an error counts.
        for made in await asyncio.gather(objects(), attempt_env(), return_exceptions=True):
            if isinstance(made, BaseException):
                raise made
        outcomes = await create_stream(self.kube, namespace, only_named(result.pods_to_create, wanted),
                                       2 * self.settings.api_concurrency)
        # A pod whose name was taken is this job's (created by an earlier reconcile, not indexed yet) or in the
        # way: pods are many, so these reads go on together.
        await asyncio.gather(*(claim_existing(self.kube, namespace, _pod_named(name), uid)
                               for name, outcome in outcomes if outcome is not None and _exists(outcome)))
        self.expectations.created(key, [name for name, outcome in outcomes if outcome is None or _exists(outcome)])
        self.metrics.pods_created.inc(sum(1 for _, o in outcomes if o is None))
        errors = [o for _, o in outcomes if o is not None and not _exists(o)]
        if errors:
            raise errors[0]

    def _hold_first_status(self, job: TrainingJob, result: Plan) -> bool:
        """Hold a new job's first status until its pods are seen, or the wait is up; a timer brings the pass
        that writes it then."""
        uid, now = job.metadata.uid or "", time.monotonic()
        held = self.held.get(uid)
        until = held.until if held is not None else now + self.settings.first_status_wait_seconds
        if now >= until or not first_status_waits(result, on_server=job.status, written=uid in self.written):
            return False
        self.held[uid] = HeldStatus(result.status, [*(held.events if held is not None else []), *result.events],
                                    until)
        wait = until - now
        result.requeue_after = wait if result.requeue_after is None else min(wait, result.requeue_after)
        return True

    async def _write_status(self, job: TrainingJob, before: TrainingJobStatus | None, result: Plan) -> None:
        desired = dump_status(result.status)
        # Compare with the server's copy too: a patch we gave up on (timeout) can still land after a newer one.
        on_server = None if job.status is None else dump_status(job.status)
        uid = job.metadata.uid or ""
        if before is None or dump_status(before) != desired or on_server != desired:
            version = await self.kube.patch_job_status(*job_key(job), status_patch(desired, before, on_server))
            if version is not None:
                self.written_versions[uid] = version
        self.written[uid] = result.status
        self._account(job, before, result)
        held = self.held.pop(uid, None)
        events = [*held.events, *result.events] if held is not None else result.events
        if events:
            # After the status that says so, without holding the worker for their round trips: the job's next
            # reconcile would not post them again anyway (the status written already has the phase).
            meta = {"name": job.metadata.name, "namespace": job.metadata.namespace, "uid": job.metadata.uid}
            posting = asyncio.create_task(self._post_events(meta, events))
            self.posting.add(posting)
            posting.add_done_callback(self.posting.discard)

    async def _post_events(self, meta: dict[str, Any], events: list[Event]) -> None:
        for event in events:
            try:
                await self.kube.post_event(meta, event.type, event.reason, event.message)
            except ApiError as e:
                log.warning("event %s of %s/%s not posted: %s", event.reason, meta["namespace"], meta["name"],
                            e.message)

    async def stop(self) -> None:
        """Cancel the Events still being posted (the client closes next)."""
        for task in self.posting:
            task.cancel()
        await asyncio.gather(*self.posting, return_exceptions=True)

    def _account(self, job: TrainingJob, before: TrainingJobStatus | None, result: Plan) -> None:
        """Metrics from what this reconcile changed."""
        status = result.status
        if status.phase:
            self.phases[job.metadata.uid or ""] = status.phase.value
        if status.goodput is not None:
            g = status.goodput
            namespace, name = job_key(job)
            self.figures[job.metadata.uid or ""] = JobFigures(
                namespace, name, g.productive_seconds,
                {cause.value: g.lost.get(cause) for cause in LostCause},
                status.progress.step if status.progress else None,
                status.progress.straggler_count if status.progress else None)
        if any(e.reason == Reason.RESTARTING for e in result.events) and status.restart_history:
            record = status.restart_history[-1]
            self.metrics.restarts.labels(reason=record.reason, counted=str(record.counted).lower()).inc()
        age = _age_seconds(job)
        if age is None:
            return
        first_attempt = status.restarts + status.uncounted_restarts == 0
        if first_attempt and _created(status) and not (before is not None and _created(before)):
            self.metrics.job_pods_created.observe(age)
        was_running = before is not None and before.phase == Phase.RUNNING
        if first_attempt and status.phase == Phase.RUNNING and not was_running:
            self.metrics.job_running.observe(age)

    async def write_failure_for_invalid(self, raw: Mapping[str, Any], message: str) -> None:
        """A stored job the API models refuse: Failed with InvalidSpec, once."""
        meta = raw.get("metadata") or {}
        if (raw.get("status") or {}).get("phase") == "Failed":
            return
        status = TrainingJobStatus()
        mark_failed(status, Reason.INVALID_SPEC, message, now=datetime.now(timezone.utc))
        await self.kube.patch_job_status(meta["namespace"], meta["name"], dump_status(status))
