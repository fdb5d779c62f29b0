"""Reads the trainers' logs of jobs with spec.hangDetection, so the planner can tell progress from a hang.

Only jobs with hangDetection, only the current attempt's running trainers, through the apiserver
(pods/log: the operator needs no access to nodes). Each job is swept every `poll_period(timeout)` seconds:
a fifth of the timeout, between 2 and 30 s, so a hang is seen at most a fifth of the timeout late. One
sweep reads each rank's log since the last line it read (`sinceTime`, at most TAIL_LINES lines: what
counts is the newest progress, not every line), at most LOG_READ_CONCURRENCY reads at once across all
jobs, and then marks the job dirty: the reconcile that follows judges hangs and stragglers
(reconcile/hang.py, reconcile/stragglers.py) from what was read. What the lines mean is decided in
reconcile/progress.py; this module only fetches them.

Cost: one GET per running rank per period (a 1000-node job with a 10-minute timeout: 1000 reads each
30 s, about 33 a second, served by the kubelets). Memory: each log is folded into a few fields as soon as
it is read (reconcile/progress.py fold_log), so log text is held for at most LOG_READ_CONCURRENCY reads at
a time (each up to LIMIT_BYTES), whatever the number of ranks; what is kept is per job and per rank, a
constant size, dropped when the attempt changes or the job finishes (docs/benchmarks.md measures it with
1000 ranks logging 1 MB/s each: tools/bench/progress_memory.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from multinode.api.constants import PROGRESS_MARKER, TRAINER_CONTAINER
from multinode.api.timestamps import rfc3339
from multinode.controller.kube import ApiError, KubeApi
from multinode.controller.stores import JobKey, JobStore, PodStore
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.progress import AttemptLog, JobProgress, RankRead, absorb_sweep, fold_log, job_progress

log = logging.getLogger("multinode.controller.progress")

TICK_SECONDS = 1.0
MIN_PERIOD_SECONDS = 2.0
MAX_PERIOD_SECONDS = 30.0
TAIL_LINES = 1000
LIMIT_BYTES = 4 * 1024 * 1024  # a safety bound only: the apiserver cuts past it, losing the newest lines
LOG_READ_CONCURRENCY = 4


def poll_period(timeout_seconds: float) -> float:
    return min(MAX_PERIOD_SECONDS, max(MIN_PERIOD_SECONDS, timeout_seconds / 5))


def _timeout(raw: Mapping[str, Any]) -> float | None:
    spec = (raw.get("spec") or {}).get("hangDetection") or {}
    value = spec.get("timeoutSeconds")
    return float(value) if value else None


class ProgressProbe:
    def __init__(self, kube: KubeApi, jobs: JobStore, pods: PodStore,
                 attempt_of: Callable[[Mapping[str, Any]], int], on_swept: Callable[[JobKey], None],
                 concurrency: int = LOG_READ_CONCURRENCY):
        self._kube, self._jobs, self._pods = kube, jobs, pods
        self._attempt_of, self._on_swept = attempt_of, on_swept
        self._limit = asyncio.Semaphore(concurrency)
        self._logs: dict[JobKey, AttemptLog] = {}
        self._progress: dict[JobKey, JobProgress] = {}
        self._due: dict[JobKey, float] = {}
        self._sweeping: dict[JobKey, asyncio.Task[None]] = {}

    def progress(self, key: JobKey) -> JobProgress | None:
        return self._progress.get(key)

    def forget(self, key: JobKey) -> None:
        for store in (self._logs, self._progress, self._due):
            store.pop(key, None)
        task = self._sweeping.pop(key, None)
        if task is not None:
            task.cancel()

    async def run(self) -> None:
        while True:
            self._start_due_sweeps()
            await asyncio.sleep(TICK_SECONDS)

    async def stop(self) -> None:
        tasks = list(self._sweeping.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _finished(self, key: JobKey) -> Callable[[asyncio.Task[Any]], None]:
        """A done-callback that forgets `key`'s sweep, so the next one may start."""
        def forget(_task: asyncio.Task[Any]) -> None:
            self._sweeping.pop(key, None)
        return forget

    def _start_due_sweeps(self) -> None:
        now = time.monotonic()
        watched = set()
        for key in self._jobs.keys():
            raw = self._jobs.get(key)
            timeout = _timeout(raw or {})
            phase = ((raw or {}).get("status") or {}).get("phase")
            if raw is None or timeout is None or phase in ("Succeeded", "Failed"):
                continue
            watched.add(key)
            if key in self._sweeping or self._due.get(key, 0.0) > now:
                continue
            self._due[key] = now + poll_period(timeout)
            uid = (raw.get("metadata") or {}).get("uid")
            task = asyncio.create_task(self._sweep(key, self._attempt_of(raw), uid), name=f"progress-{key[0]}/{key[1]}")
            self._sweeping[key] = task
            task.add_done_callback(self._finished(key))
        for key in set(self._logs) | set(self._due):
            if key not in watched:
                self.forget(key)

    async def _sweep(self, key: JobKey, attempt: int, uid: str | None) -> None:
        checked = datetime.now(timezone.utc)  # lines written during the sweep may be missed: count up to here
        memory = self._logs.get(key)
        if memory is None or memory.attempt != attempt:
            memory = AttemptLog(attempt)
        pods = [p for p in self._pods.of_job(*key, uid)
                if p.runs_attempt == attempt and p.phase == PodPhase.RUNNING and not p.terminating and p.started_at]
        reads = await asyncio.gather(*(self._read(key[0], p, memory) for p in pods))
        got = {p.index: r for p, r in zip(pods, reads, strict=True) if r is not None}
        memory = absorb_sweep(memory, got)
        self._logs[key] = memory
        self._progress[key] = job_progress(memory, set(got), checked)
        self._on_swept(key)

    async def _read(self, namespace: str, pod: ObservedPod, memory: AttemptLog) -> RankRead | None:
        """Read pod's new lines and fold them at once: at most LOG_READ_CONCURRENCY logs' text is held at any
        time, however many ranks a sweep reads (the folds are a few fields each)."""
        cursor = memory.cursors.get(pod.name)
        since = None if cursor is None else rfc3339(datetime.fromtimestamp(cursor // 1_000_000_000, timezone.utc))
        async with self._limit:
            try:
                raw = await self._kube.read_log(namespace, pod.name, TRAINER_CONTAINER, tail_lines=TAIL_LINES,
                                                limit_bytes=LIMIT_BYTES, since_time=since)
            except ApiError as e:
                # No verdict on a rank whose log cannot be read (the planner needs every rank's).
                log.warning("cannot read the log of %s/%s: %s", namespace, pod.name, e)
                return None
            return fold_log(raw, pod=pod.name, node=pod.node, after=cursor, before=memory.rank(pod.index),
                            marker=PROGRESS_MARKER)
