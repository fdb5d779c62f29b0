"""Reconcile one queued job: read it and its pods from the in-memory indices, plan, apply the plan.

The only place that turns a Plan into API calls. Reads come from kopf's indices (kept current by the
watch streams), so a reconcile costs no GET; writes are the plan's creates, deletes, one status patch
when the status changed, and one event per phase change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from multinode import __version__
from multinode.api import Phase, TrainingJob, TrainingJobStatus, read_stored_job
from multinode.api.conditions import ConditionType, Reason
from multinode.api.goodput import LostCause
from multinode.api.timestamps import parse_time
from multinode.controller.attempt_env import AttemptEnvs
from multinode.controller.creates import create_stream
from multinode.controller.index_keys import mirror_key
from multinode.controller.kube import ApiError, KubeApi
from multinode.controller.ownership import ForeignObject, claim_existing
from multinode.controller.progress_probe import ProgressProbe
from multinode.controller.queue import WorkQueue
from multinode.controller.settings import OperatorSettings
from multinode.controller.status_patch import describe_validation_error, dump_status, status_patch
from multinode.metrics.operator import JobFigures, OperatorMetrics
from multinode.reconcile import Observed, ObservedPod, Plan, plan
from multinode.reconcile.checkpointing import Resumer
from multinode.reconcile.kueue import queue_name
from multinode.reconcile.node_loss import NodeDown, node_down
from multinode.reconcile.outcome import TERMINAL_PHASES, only_named, pod_names
from multinode.reconcile.placement import needs_nodes
from multinode.reconcile.refusals import counts_as_created, creation_refused, foreign_object_found
from multinode.reconcile.status_report import mark_failed

log = logging.getLogger("multinode.controller")

JobKey = tuple[str, str]  # (namespace, name)

# How long a pod this operator created is trusted to exist before the pod index shows it (client-go's
# "expectations"): until then a reconcile would see it missing and create it again, only to get 409.
EXPECTATION_TTL_SECONDS = 30.0
MAX_GONE_PER_JOB = 256  # disrupted pods remembered per job after their deletion (Reconciler.gone)
NAMESPACE_UNLISTED_RETRY_SECONDS = 2.0  # a job whose namespace is not listed yet is looked at again


# After a reconcile of a job whose pods changed meanwhile, wait REST_FACTOR × its duration (at most
# MAX_REST_SECONDS) before the next: a 1000-pod reconcile takes tens of milliseconds, and back to back they
# took a quarter of the operator's CPU during a start, CPU the apiserver needed (docs/benchmarks.md).
REST_FACTOR = 3.0
MAX_REST_SECONDS = 1.0


@dataclass(frozen=True)
class Indices:
    """Live mappings the watch streams keep current (handlers.py builds them): the jobs from kopf's
    TrainingJob events, everything else from our own informers (watches.py). Every reconcile reads the job
    and its pods from here, so it costs no GET. Values are collections, one entry per object (see
    _single)."""

    jobs: Mapping[Hashable, Any] = field(default_factory=dict)  # (namespace, name) → the job's body
    pods: Mapping[Hashable, Any] = field(default_factory=dict)  # (namespace, job) → ObservedPod; mirror_key → mirror
    services: Mapping[Hashable, Any] = field(default_factory=dict)  # (namespace, job) → OwnedName of its Service
    nodes: Mapping[Hashable, Any] = field(default_factory=dict)  # None → every ObservedNode; name → its own
    pod_groups: Mapping[Hashable, Any] = field(default_factory=dict)  # (namespace, job) → ObservedPodGroup
    workloads: Mapping[Hashable, Any] = field(default_factory=dict)  # (namespace, job) → ObservedWorkload
    flavors: Mapping[Hashable, Any] = field(default_factory=dict)  # ResourceFlavor name → its nodeLabels


def _single(store: Any) -> Any:
    """Index values are collections (one entry per object); ours hold exactly one."""
    for value in store or ():
        return value
    return None


def _owned(store: Any, uid: str | None) -> list[Any]:
    """The entries of an index value whose object the job `uid` controls (reconcile/ownership.py): one with the
    job's labels and another owner is not the job's."""
    return [value for value in store or () if value.owner_uid == uid]


def _created(status: TrainingJobStatus) -> bool:
    return any(c.type == ConditionType.CREATED and c.status == "True" for c in status.conditions)


def _age_seconds(job: TrainingJob) -> float | None:
    created = job.metadata.creation_timestamp
    if not created:
        return None
    now = datetime.now(timezone.utc)
    return (now - parse_time(str(created), now)).total_seconds()


def _key(job: TrainingJob) -> JobKey:
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


class Reconciler:
    def __init__(self, kube: KubeApi, settings: OperatorSettings, indices: Indices,
                 metrics: OperatorMetrics | None = None, *, gang_api: bool = False, kueue_api: bool = False):
        self.kube = kube
        # Whether the apiserver serves Kueue's Workloads (asked once, at start, like gang_api).
        self.kueue_api = kueue_api
        # Whether the apiserver serves native PodGroups (handlers.py asks discovery once, at start).
        self.gang_api = gang_api
        self.settings = settings
        self.metrics = metrics or OperatorMetrics()
        self.queue: WorkQueue[JobKey] = WorkQueue()
        # Phase of every job this operator has reconciled, by uid: multinode_trainingjobs{phase}.
        self.phases: dict[str, str] = {}
        # Goodput and step of every job, by uid, from the status last written: multinode_trainingjob_*.
        self.figures: dict[str, JobFigures] = {}
        self.indices = indices
        # The last status this operator wrote, per job uid. The index can lag behind our own write by
        # one watch event; the operator is the only writer of these fields, so its copy is the newest.
        self.written: dict[str, TrainingJobStatus] = {}
        # Pods created (or found existing, 409) but not seen by the pod index yet: name → when.
        self.expected: dict[JobKey, dict[str, float]] = {}
        self.attempt_envs = AttemptEnvs(kube)
        # Why deleted pods were disrupted, from their last watch event (the scheduler preempts and deletes at once).
        self.gone: dict[JobKey, dict[str, str]] = {}
        self._failures: dict[JobKey, int] = {}
        # The generation of each job (by uid) whose spec fields unknown to this version were last logged.
        self._unknown_logged: dict[str, int] = {}
        self._tasks: list[asyncio.Task] = []
        # Whether a namespace's objects are in the indices (handlers.py sets the namespaced watches' own
        # answer): a job planned before would have its existing pods created again.
        self.namespace_listed: Callable[[str], bool] = lambda namespace: True
        # The generation each job (by uid) was last planned at: what the periodic re-list (resync.py) checks
        # a job's status against before it calls the job missed.
        self.reconciled: dict[str, int | None] = {}
        # Reads the trainers' logs of jobs with spec.hangDetection; each sweep marks its job dirty.
        self.probe = ProgressProbe(kube, indices.jobs, indices.pods, self._attempt_of, self.queue.add)

    def _attempt_of(self, raw: Mapping[str, Any]) -> int:
        """The job's current attempt: the status this operator wrote last, else the object's."""
        written = self.written.get((raw.get("metadata") or {}).get("uid") or "")
        return written.attempt if written is not None else int((raw.get("status") or {}).get("attempt") or 0)

    def start(self, after: Callable[[], Awaitable[None]] | None = None) -> None:
        """Start the workers, once `after()` is done if given (the pod and node watches' first LIST: a
        reconcile must see every pod that exists, or it would create missing ones twice)."""
        async def run() -> None:
            if after is not None:
                await after()
            for i in range(self.settings.workers):
                self._tasks.append(asyncio.create_task(self._work(), name=f"multinode-worker-{i}"))
            self._tasks.append(asyncio.create_task(self.probe.run(), name="multinode-progress-probe"))
        self._tasks.append(asyncio.create_task(run(), name="multinode-workers-start"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.probe.stop()
        self.queue.shutdown()
        await self.kube.close()

    def forget(self, key: JobKey, uid: str | None) -> None:
        self.queue.forget(key)
        self._failures.pop(key, None)
        self.expected.pop(key, None)
        self.attempt_envs.forget(key)
        self.gone.pop(key, None)
        self.probe.forget(key)
        if uid:
            self.reconciled.pop(uid, None)
            self.written.pop(uid, None)
            self.phases.pop(uid, None)
            self.figures.pop(uid, None)
            self._unknown_logged.pop(uid, None)

    def _log_unknown(self, job: TrainingJob, unknown: tuple[str, ...]) -> None:
        """Once per generation: fields a CRD newer than this operator accepted, which it does not apply."""
        uid, generation = job.metadata.uid or "", job.metadata.generation or 0
        if self._unknown_logged.get(uid) != generation:
            self._unknown_logged[uid] = generation
            log.warning("%s/%s: %s unknown to this operator (%s), not applied: the CRD is newer than the operator",
                        *_key(job), ", ".join(unknown), __version__)

    def busy(self, key: JobKey) -> bool:
        """Queued, being reconciled, or waiting for a timer: this job's next reconcile is already coming."""
        return key in self.queue

    def pod_gone(self, key: JobKey, name: str, disruption: str) -> None:
        gone = self.gone.setdefault(key, {})
        gone[name] = disruption
        while len(gone) > MAX_GONE_PER_JOB:  # the oldest go: only the attempt being judged matters
            del gone[next(iter(gone))]

    def pod_seen(self, key: JobKey, name: str) -> None:
        """A watch event of pod `name`: the index has it (or its deletion), so stop expecting it."""
        expected = self.expected.get(key)
        if expected is not None:
            expected.pop(name, None)
            if not expected:
                del self.expected[key]

    def _not_expected(self, key: JobKey, names: list[str], indexed: set[str]) -> set[str]:
        """A plan's pod names minus those this operator created moments ago (the index lags its creates)."""
        expected = self.expected.get(key)
        if not expected:
            return set(names)
        now = time.monotonic()
        for name, since in list(expected.items()):
            # In the index (its watch event beat our create's response), or too old (never seen: lost).
            if name in indexed or now - since > EXPECTATION_TTL_SECONDS:
                del expected[name]
        return {name for name in names if name not in expected}

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            started = time.monotonic()
            try:
                await self.reconcile(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a worker must survive anything and retry
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                delay = min(self.settings.max_retry_delay_seconds, 0.5 * 2 ** (failures - 1))
                summary = e.message if isinstance(e, (ApiError, ForeignObject)) else repr(e)
                log.warning("reconcile of %s/%s failed (%d in a row), retrying in %.1fs: %s",
                            key[0], key[1], failures, delay, summary)
                self.queue.add(key, delay=delay)
            finally:
                took = time.monotonic() - started
                self.metrics.reconcile_duration.observe(took)
                # Rest a multiple of what the reconcile took (≈0 for small jobs, a fraction of a second for
                # a 1000-pod one), capping the CPU one busy job's reconciles can take from everything else.
                self.queue.done(key, rest=min(MAX_REST_SECONDS, REST_FACTOR * took))

    async def reconcile(self, key: JobKey) -> None:
        raw = _single(self.indices.jobs.get(key))
        if raw is None:
            return  # deleted; owner references let the garbage collector remove the rest
        meta = raw.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        if not self.namespace_listed(key[0]):
            self.queue.add(key, delay=NAMESPACE_UNLISTED_RETRY_SECONDS)
            return
        try:
            job, unknown = read_stored_job(raw)
        except ValidationError as e:
            # The CRD schema should make this unreachable; if it is reached, say so on the object.
            await self._write_failure_for_invalid(raw, describe_validation_error(e))
            return
        if unknown:
            self._log_unknown(job, unknown)
        uid = job.metadata.uid
        pods: list[ObservedPod] = _owned(self.indices.pods.get(key), uid)
        mirror = _single(_owned(self.indices.pods.get(mirror_key(*key)), uid))
        observed = Observed(pods=tuple(pods), service_exists=bool(_owned(self.indices.services.get(key), uid)),
                            mirror=mirror,
                            resume_source_latest=self._resume_source_latest(job), resumers=self._resumers(job),
                            nodes=tuple(self.indices.nodes.get(None) or ()) if needs_nodes(job, pods) else (),
                            down_nodes=self._down_nodes([*(p.node for p in pods), mirror and mirror.node]),
                            progress=self.probe.progress(key), gone_disruptions=dict(self.gone.get(key) or {}),
                            gang_api=self.gang_api, pod_groups=tuple(_owned(self.indices.pod_groups.get(key), uid)),
                            **await self._kueue_observed(job, key))
        previous = self.written.get(job.metadata.uid or "")
        result = plan(job, observed, previous=previous, now=datetime.now(timezone.utc), settings=self.settings.render)
        try:
            await self._apply_creates(job, result, {p.name for p in pods})
        except ForeignObject as e:
            result = foreign_object_found(job, result, e.message, now=datetime.now(timezone.utc)).plan or result
            await self._write_status(job, previous or job.status, result)  # say why before the retry
            raise
        except ApiError as e:
            refused = creation_refused(job, result, pods, e.status, e.message, now=datetime.now(timezone.utc),
                                       api_version=e.api_version)
            if refused.plan is not None:
                result = refused.plan
                if refused.retry:  # say why on the job before the retry
                    await self._write_status(job, previous or job.status, result)
            if refused.retry:
                raise
        namespace, job_name = _key(job)
        await asyncio.gather(*(self.kube.delete_pod(namespace, name)
                               for name in result.pods_to_delete),
                             *(self.kube.delete_pod(namespace, name, force=True)
                               for name in result.pods_to_force_delete),
                             *(self.kube.delete_pod_group(namespace, name)
                               for name in result.pod_groups_to_delete))
        await asyncio.gather(*(self.kube.delete_workload(namespace, name) for name in result.workloads_to_delete))
        if result.workload_status is not None:
            write = result.workload_status
            await self.kube.patch_workload_status(namespace, write.name, write.resource_version, write.status)
        prune = result.gang_groups_to_prune
        if prune is not None:  # after the attempt's own group was made (_apply_creates)
            await self.kube.prune_gang_groups(namespace, prune.api_version, prune.job, prune.attempt,
                                              job.metadata.uid or "")
        await self._write_status(job, previous or job.status, result)
        if result.job_suspend is not None and result.job_suspend != job.spec.suspend:
            # Kueue admitted (false) or evicted (true) the job's Workload: after the status that says so.
            await self.kube.patch_job_suspend(namespace, job_name, result.job_suspend)
        self.reconciled[job.metadata.uid or ""] = job.metadata.generation
        if result.delete_job:
            await self.kube.delete_job(namespace, job_name)
            return
        if result.requeue_after is not None:
            self.queue.add(key, delay=result.requeue_after)

    async def _kueue_observed(self, job: TrainingJob, key: JobKey) -> dict[str, Any]:
        """What the Kueue integration reads (reconcile/kueue.py): nothing for a job without a queue name."""
        if not self.kueue_api or queue_name(job) is None:
            return {"kueue_api": self.kueue_api}
        workload = _single(_owned(self.indices.workloads.get(key), job.metadata.uid))
        flavors = {}
        for name in workload.flavors if workload is not None else ():
            labels = _single(self.indices.flavors.get(name))
            if labels is not None:
                flavors[name] = labels
        priority = None
        priority_class = job.spec.pod_template.priority_class_name
        if workload is None and priority_class:  # read once, when the Workload is made
            priority = await self.kube.priority_class_value(priority_class)
        return {"kueue_api": True, "workload": workload, "flavors": flavors, "priority": priority}

    def _down_nodes(self, hosts: list[str | None]) -> dict[str, NodeDown]:
        """Of the nodes hosting this job's pods (and its mirror), those not Ready or gone: one lookup by name
        per node, so a reconcile costs O(pods), never O(nodes in the cluster)."""
        down = {}
        for host in {h for h in hosts if h}:
            state = node_down(_single(self.indices.nodes.get(host)))
            if state is not None:
                down[host] = state
        return down

    def _resumers(self, job: TrainingJob) -> tuple[Resumer, ...]:
        """The jobs of this namespace whose resumeFrom.trainingJob names `job` (a checkpointed one): read from
        the jobs index, which holds the namespace whole once its watch listed, so no pin is dropped because
        a resuming job was not reconciled yet. O(jobs watched), only for jobs with spec.checkpointing."""
        if job.spec.checkpointing is None:
            return ()
        namespace, name = job.metadata.namespace, job.metadata.name
        found = []
        for key in list(self.indices.jobs):
            if not (isinstance(key, tuple) and len(key) == 2 and key[0] == namespace and key[1] != name):
                continue
            other = _single(self.indices.jobs.get(key)) or {}
            resume = (((other.get("spec") or {}).get("checkpointing") or {}).get("resumeFrom") or {})
            if resume.get("trainingJob") == name:
                status = other.get("status") or {}
                found.append(Resumer(name=key[1], finished=status.get("phase") in TERMINAL_PHASES,
                                     resumed_from=status.get("resumedFrom")))
        return tuple(found)

    def _resume_source_latest(self, job: TrainingJob) -> str | None:
        """The latest mirrored checkpoint of the job named in resumeFrom.trainingJob (same namespace)."""
        ckpt = job.spec.checkpointing
        if ckpt is None or ckpt.resume_from is None or ckpt.resume_from.training_job is None:
            return None
        source = _single(self.indices.jobs.get((job.metadata.namespace, ckpt.resume_from.training_job)))
        latest = ((source or {}).get("status") or {}).get("checkpoints", {}).get("latest") or {}
        return latest.get("path")

    async def _apply_creates(self, job: TrainingJob, result: Plan, indexed: set[str]) -> None:
        key = _key(job)
        namespace, uid = key[0], job.metadata.uid or ""
        for obj in ([result.service] if result.service is not None else []) + result.objects_to_create:
            # In order: the Service, the mirror's identity, the mirror, then the attempt's PodGroup (before its pods).
            try:
                await self.kube.create(namespace, obj)
            except ApiError as e:
                if not counts_as_created(e.status):
                    raise
                await claim_existing(self.kube, namespace, obj, uid)  # the name is taken: by this job?
        wanted = self._not_expected(key, pod_names(result.pods_to_create), indexed)
        if wanted and result.attempt_env is not None:
            await self.attempt_envs.ensure(namespace, key, result.attempt_env, result.stale_attempt_env, uid)
        outcomes = await create_stream(self.kube, namespace, only_named(result.pods_to_create, wanted),
                                       2 * self.settings.api_concurrency)
        # A pod whose name was taken is this job's (created by an earlier reconcile, not indexed yet) or in the
        # way: pods are many, so these reads go on together.
        await asyncio.gather(*(claim_existing(self.kube, namespace, _pod_named(name), uid)
                               for name, outcome in outcomes if outcome is not None and _exists(outcome)))
        expected, now = self.expected.setdefault(key, {}), time.monotonic()
        expected.update((name, now) for name, outcome in outcomes if outcome is None or _exists(outcome))
        if not expected:
            del self.expected[key]
        self.metrics.pods_created.inc(sum(1 for _, o in outcomes if o is None))
        errors = [o for _, o in outcomes if o is not None and not _exists(o)]
        if errors:
            raise errors[0]

    async def _write_status(self, job: TrainingJob, before: TrainingJobStatus | None, result: Plan) -> None:
        desired = dump_status(result.status)
        # Compare with the server's copy too: a patch we gave up on (timeout) can still land after a newer one.
        on_server = None if job.status is None else dump_status(job.status)
        if before is None or dump_status(before) != desired or on_server != desired:
            await self.kube.patch_job_status(*_key(job), status_patch(desired, before, on_server))
        self.written[job.metadata.uid or ""] = result.status
        self._account(job, before, result)
        meta = {"name": job.metadata.name, "namespace": job.metadata.namespace, "uid": job.metadata.uid}
        for event in result.events:
            await self.kube.post_event(meta, event.type, event.reason, event.message)

    def _account(self, job: TrainingJob, before: TrainingJobStatus | None, result: Plan) -> None:
        """Metrics from what this reconcile changed."""
        status = result.status
        if status.phase:
            self.phases[job.metadata.uid or ""] = status.phase.value
        if status.goodput is not None:
            g = status.goodput
            namespace, name = _key(job)
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

    async def _write_failure_for_invalid(self, raw: Mapping[str, Any], message: str) -> None:
        meta = raw.get("metadata") or {}
        if (raw.get("status") or {}).get("phase") == "Failed":
            return
        status = TrainingJobStatus()
        mark_failed(status, Reason.INVALID_SPEC, message, now=datetime.now(timezone.utc))
        await self.kube.patch_job_status(meta["namespace"], meta["name"], dump_status(status))
