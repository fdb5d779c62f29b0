"""Every rank's trainer log as one stream, following the gang across restarts.

One thread per pod stream (the kubelet serves each pod's log on its own HTTP stream) feeding one queue,
and one coordinator thread that watches the job's pods: with `follow` it opens a stream for each chosen
pod as soon as its trainer has started, the next attempt's pods included, and ends once no stream is open
and the job has finished. Threads, not asyncio: the official client's streams are blocking reads, and the
number of streams is bounded (pods.select_for_logs).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from multinode.api.constants import TRAINER_CONTAINER
from multinode.api.status import TERMINAL_PHASES
from multinode.client.connection import ClientError, Kube
from multinode.client.pods import DEFAULT_MAX_STREAMS, NodePod, node_pod, node_pods, select_for_logs

# How long one pod watch runs before the coordinator looks at the job again (only when no stream is open).
_WATCH_SECONDS = 5


@dataclass(frozen=True)
class LogLine:
    rank: int
    attempt: int
    pod: str
    text: str


@dataclass(frozen=True)
class LogScope:
    """Which pods to read: `attempt` K, every attempt still present, or (neither) the newest attempt, which
    moves on when the gang restarts and `follow` is on. `ranks` None: pods.select_for_logs's default."""

    ranks: tuple[int, ...] | None = None
    attempt: int | None = None
    all_attempts: bool = False
    max_streams: int = DEFAULT_MAX_STREAMS

    def pods(self, pods: list[NodePod]) -> list[NodePod]:
        if self.all_attempts:
            return pods
        if self.attempt is not None:
            return [p for p in pods if p.attempt == self.attempt]
        newest = max((p.attempt for p in pods), default=0)
        return [p for p in pods if p.attempt == newest]

    def chosen(self, pods: list[NodePod]) -> tuple[list[NodePod], int]:
        return select_for_logs(self.pods(pods), ranks=self.ranks, max_streams=self.max_streams)


def stream_logs(kube: Kube, namespace: str, job: str, scope: LogScope, *, follow: bool = False,
                since_seconds: int | None = None, tail_lines: int | None = None,
                notice: Callable[[str], None] = lambda message: None) -> Iterator[LogLine]:
    """The chosen ranks' trainer lines. Without `follow`, pod after pod (by attempt, then rank) so the
    output reads in order; with it, lines as they come from every stream. `notice` hears what the user
    should know besides the lines (ranks left out, a new attempt)."""
    pods = node_pods(kube.list_job_pods(namespace, job)[0])
    if not follow:
        chosen, left_out = scope.chosen(pods)
        _announce(notice, scope, chosen, left_out)
        for pod in chosen:
            if not pod.started:
                notice(f"{pod.name}: trainer not started ({pod.reason or pod.phase}), no log yet")
                continue
            for text in kube.pod_log_lines(namespace, pod.name, TRAINER_CONTAINER, follow=False,
                                           since_seconds=since_seconds, tail_lines=tail_lines):
                yield LogLine(pod.rank, pod.attempt, pod.name, text)
        return
    follower = _Follower(kube, namespace, job, scope, since_seconds, tail_lines, notice)
    yield from follower.run()


def _announce(notice: Callable[[str], None], scope: LogScope, chosen: list[NodePod], left_out: int) -> None:
    if left_out:
        notice(f"showing {len(chosen)} of {len(chosen) + left_out} ranks (the leader, failing and not running "
               f"ranks first); --rank R or --max-streams 0 for others")
    if not chosen and not left_out:
        notice("no pods match yet")


_DONE = object()


class _Follower:
    def __init__(self, kube: Kube, namespace: str, job: str, scope: LogScope, since_seconds: int | None,
                 tail_lines: int | None, notice: Callable[[str], None]):
        self.kube, self.namespace, self.job, self.scope = kube, namespace, job, scope
        self.since_seconds, self.tail_lines, self.notice = since_seconds, tail_lines, notice
        self.lines: queue.Queue[object] = queue.Queue(maxsize=10000)
        self.stopping = threading.Event()
        self.pods: dict[str, NodePod] = {}
        self.streamed: set[str] = set()
        self.active: set[str] = set()
        self.lock = threading.Lock()
        self.error: Exception | None = None
        self.newest_attempt = -1

    def run(self) -> Iterator[LogLine]:
        coordinator = threading.Thread(target=self._coordinate, name="logs-coordinator", daemon=True)
        coordinator.start()
        try:
            while True:
                item = self.lines.get()
                if item is _DONE:
                    break
                assert isinstance(item, LogLine)
                yield item
        finally:
            self.stopping.set()  # the caller stopped reading (Ctrl-C, a closed generator): threads wind down
        if self.error is not None:
            raise self.error

    def _coordinate(self) -> None:
        try:
            raw, version = self.kube.list_job_pods(self.namespace, self.job)
            self.pods = {p.name: p for p in node_pods(raw)}
            chosen, left_out = self.scope.chosen(list(self.pods.values()))
            _announce(self.notice, self.scope, chosen, left_out)
            self._open_streams(first=True)
            while not self.stopping.is_set():
                try:
                    version = self._watch(version)
                except ClientError as e:
                    if e.status != 410:
                        raise
                    version = ""  # 410 Gone: the resourceVersion is too old; list again
                if self.stopping.is_set():
                    return
                if not version:
                    raw, version = self.kube.list_job_pods(self.namespace, self.job)
                    self.pods = {p.name: p for p in node_pods(raw)}
                    self._open_streams(first=False)
                if self._finished():
                    return
        except ClientError as e:
            self.error = e
        finally:
            self.lines.put(_DONE)

    def _watch(self, version: str) -> str:
        """One watch of the job's pods from `version`, opening streams as pods start; the last version seen,
        or "" when the apiserver says it is too old."""
        for kind, obj in self.kube.watch_job_pods(self.namespace, self.job, version, _WATCH_SECONDS):
            if kind == "ERROR":
                return ""
            version = obj["metadata"].get("resourceVersion", version)
            pod = node_pod(obj)
            if pod is None:
                continue
            if kind == "DELETED":
                self.pods.pop(pod.name, None)
            else:
                self.pods[pod.name] = pod
            self._open_streams(first=False)
            if self.stopping.is_set():
                break
        return version

    def _finished(self) -> bool:
        """No stream open and the job finished (or gone): nothing more will be written."""
        with self.lock:
            if self.active:
                return False
        if self.scope.attempt is not None and self.scope.attempt < self.newest_attempt:
            return True  # an earlier attempt, read to its end: its pods write nothing more
        try:
            phase = (self.kube.get_job(self.namespace, self.job).get("status") or {}).get("phase")
        except ClientError as e:
            if e.status == 404:
                return True
            raise
        if phase not in TERMINAL_PHASES:
            return False
        # Streams of pods that started since the last event are opened before giving up.
        self._open_streams(first=False)
        with self.lock:
            return not self.active

    def _open_streams(self, first: bool) -> None:
        pods = list(self.pods.values())
        newest = max((p.attempt for p in pods), default=-1)
        if newest > self.newest_attempt:
            if self.newest_attempt >= 0 and self.scope.attempt is None:
                self.notice(f"attempt {newest} started")
            self.newest_attempt = newest
        chosen, _ = self.scope.chosen(pods)
        for pod in chosen:
            if pod.started and pod.name not in self.streamed:
                self.streamed.add(pod.name)
                with self.lock:
                    self.active.add(pod.name)
                since = self.since_seconds if first else None
                threading.Thread(target=self._stream, args=(pod, since), name=f"logs-{pod.name}",
                                 daemon=True).start()

    def _put(self, line: LogLine) -> bool:
        """Hand a line to the reader; False once the reader has gone (a closed generator in a notebook must
        not leave threads blocked on a full queue)."""
        while not self.stopping.is_set():
            try:
                self.lines.put(line, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def _stream(self, pod: NodePod, since_seconds: int | None) -> None:
        try:
            for text in self.kube.pod_log_lines(self.namespace, pod.name, TRAINER_CONTAINER, follow=True,
                                                since_seconds=since_seconds, tail_lines=self.tail_lines):
                if not self._put(LogLine(pod.rank, pod.attempt, pod.name, text)):
                    return
        except ClientError as e:
            # A pod deleted under its stream (the gang restarting) ends it; that is not the user's error.
            if e.status not in (400, 404):
                self.notice(f"{pod.name}: {e}")
        finally:
            with self.lock:
                self.active.discard(pod.name)
