"""A typed Python client for TrainingJobs, on the API's own pydantic models (docs/client.md).

What a notebook user does: create a job from a model or a YAML file, read it back parsed, wait for a phase
or a condition with a progress callback, list its pods by attempt, read the trainers' logs, delete it.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import yaml

from multinode.api import API_VERSION, KIND, TrainingJob, read_stored_job
from multinode.api.constants import ANNOTATION_CHECKPOINT_REQUEST
from multinode.api.status import TERMINAL_PHASES
from multinode.client.connection import ClientError, Kube
from multinode.client.logs import LogLine, LogScope, stream_logs
from multinode.client.pods import DEFAULT_MAX_STREAMS, NodePod, by_attempt, node_pods


class WaitTimeout(TimeoutError):
    """The job did not get there in time; `job` is what it last looked like (None: never seen)."""

    def __init__(self, message: str, job: TrainingJob | None):
        super().__init__(message)
        self.job = job


class JobEnded(RuntimeError):
    """The job ended in a phase the wait did not ask for (it failed while you waited for Succeeded)."""

    def __init__(self, message: str, job: TrainingJob):
        super().__init__(message)
        self.job = job


def parse_job(obj: dict[str, Any]) -> TrainingJob:
    """A job you wrote, validated: a field the API does not have is a pydantic ValidationError that names it
    (`spec.resourcesPerNode.gpu  Extra inputs are not permitted`), not a field silently dropped."""
    return TrainingJob.model_validate(obj)


def _stored(obj: dict[str, Any]) -> TrainingJob:
    """A job as the apiserver returned it. Fields of a CRD newer than this client are left out (get_raw
    has them), so reading a job never fails for them."""
    return read_stored_job(obj)[0]


def job_body(job: TrainingJob | dict[str, Any]) -> dict[str, Any]:
    """What the apiserver is sent: camelCase, no status, and only the fields that were set, so the CRD's
    defaults apply on the server as they do for `kubectl apply` (and a newer CRD's defaults win)."""
    if isinstance(job, TrainingJob):
        body = job.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True, exclude={"status"})
    else:
        body = {k: v for k, v in job.items() if k != "status"}
    body.setdefault("apiVersion", API_VERSION)
    body.setdefault("kind", KIND)
    return body


def load_yaml(path: str | Path) -> list[TrainingJob]:
    """Every TrainingJob document of a YAML file, validated by the model (a typo fails here, by field)."""
    with open(path) as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    return [parse_job(d) for d in documents if d.get("kind", KIND) == KIND]


class TrainingJobClient:
    """TrainingJobs in one namespace (the kubeconfig context's by default, as kubectl does)."""

    def __init__(self, namespace: str | None = None, *, kubeconfig: str | None = None, context: str | None = None,
                 kube: Kube | None = None):
        self.kube = kube or Kube(kubeconfig=kubeconfig, context=context)
        self.namespace = namespace or self.kube.default_namespace

    def create(self, job: TrainingJob | dict[str, Any]) -> TrainingJob:
        """Create it; returns it as stored (name, uid and the CRD's defaults filled in). A dict is validated
        first (parse_job): a misspelt field fails here, by name, instead of being pruned by the apiserver."""
        if not isinstance(job, TrainingJob):
            parse_job(job)
        return _stored(self.kube.create_job(self._namespace_of(job), job_body(job)))

    def create_from_yaml(self, path: str | Path) -> list[TrainingJob]:
        return [self.create(job) for job in load_yaml(path)]

    def get(self, name: str) -> TrainingJob:
        return _stored(self.kube.get_job(self.namespace, name))

    def get_raw(self, name: str) -> dict[str, Any]:
        """The object as the apiserver returns it, every status field included (also ones this client's
        models do not know yet)."""
        return self.kube.get_job(self.namespace, name)

    def list(self) -> list[TrainingJob]:
        return [_stored(obj) for obj in self.kube.list_jobs(self.namespace)]

    def status(self, name: str) -> dict[str, Any]:
        """status as stored (camelCase keys), {} before the operator has written one."""
        return self.get_raw(name).get("status") or {}

    def delete(self, name: str, *, wait: bool = False, timeout: float = 60) -> None:
        """Delete the job (its pods and Service follow by owner reference); `wait` until it is gone."""
        self.kube.delete_job(self.namespace, name)
        if wait and not self._gone(name):
            deadline = time.monotonic() + timeout
            for kind, _ in self._watch(name, timeout):
                if kind == "DELETED" or self._gone(name):
                    return
                if time.monotonic() >= deadline:
                    break
            if not self._gone(name):
                raise WaitTimeout(f"TrainingJob {self.namespace}/{name} still exists after {timeout}s", None)

    def wait(self, name: str, *, phases: Collection[str] = ("Succeeded",), condition: str | None = None,
             timeout: float = 600, on_progress: Callable[[TrainingJob], None] | None = None) -> TrainingJob:
        """Until the job is in one of `phases`, or (given) its condition `condition` is True; watched, not
        polled. `on_progress` gets the job at each change. Raises JobEnded when the job ends (Succeeded,
        Failed) otherwise, WaitTimeout after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        self.kube.get_job(self.namespace, name)  # a job that does not exist fails now (404), not at the timeout
        last: TrainingJob | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"TrainingJob {self.namespace}/{name} not {_goal(phases, condition)} "
                                  f"after {timeout}s (phase {_phase(last)})", last)
            for kind, obj in self._watch(name, remaining):
                if kind == "DELETED":
                    raise ClientError(f"wait for TrainingJob {self.namespace}/{name}", 404, "deleted while waiting")
                if kind == "ERROR":
                    break  # the watch expired; a new one starts from the current state
                last = _stored(obj)
                if on_progress is not None:
                    on_progress(last)
                if _reached(last, phases, condition):
                    return last
                phase = _phase(last)
                if phase in TERMINAL_PHASES and (condition is not None or phase not in phases):
                    raise JobEnded(f"TrainingJob {self.namespace}/{name} ended {phase}, not "
                                      f"{_goal(phases, condition)}", last)
                if time.monotonic() >= deadline:
                    break

    def request_checkpoint(self, name: str, request_id: str) -> None:
        """Ask the job's trainer for a checkpoint now: the operator opens status.checkpointRequest with this id
        (docs/checkpoints.md). The job must have spec.checkpointing."""
        job = self.get(name)
        if job.spec.checkpointing is None:
            raise ValueError(f"TrainingJob {self.namespace}/{name} has no spec.checkpointing: nothing would be "
                             "mirrored for the request")
        self.kube.annotate_job(self.namespace, name, {ANNOTATION_CHECKPOINT_REQUEST: request_id})

    def pods(self, name: str) -> dict[int, builtins.list[NodePod]]:  # `list` is the method above
        """The job's node pods that still exist, by attempt, each attempt's by rank."""
        return by_attempt(node_pods(self.kube.list_job_pods(self.namespace, name)[0]))

    def logs(self, name: str, *, ranks: Collection[int] | None = None, attempt: int | None = None,
             all_attempts: bool = False, follow: bool = False, since_seconds: int | None = None,
             tail_lines: int | None = None, max_streams: int = DEFAULT_MAX_STREAMS,
             notice: Callable[[str], None] = lambda message: None) -> Iterator[LogLine]:
        """The trainers' log lines (rank, attempt, pod, text); see `multinode logs` for the choices."""
        scope = LogScope(ranks=tuple(ranks) if ranks is not None else None, attempt=attempt,
                         all_attempts=all_attempts, max_streams=max_streams)
        return stream_logs(self.kube, self.namespace, name, scope, follow=follow, since_seconds=since_seconds,
                           tail_lines=tail_lines, notice=notice)

    def _namespace_of(self, job: TrainingJob | dict[str, Any]) -> str:
        meta = job.metadata.namespace if isinstance(job, TrainingJob) else (job.get("metadata") or {}).get("namespace")
        return meta or self.namespace

    def _watch(self, name: str, seconds: float) -> Iterator[tuple[str, dict[str, Any]]]:
        return self.kube.watch_job(self.namespace, name, int(seconds) + 1)

    def _gone(self, name: str) -> bool:
        try:
            self.kube.get_job(self.namespace, name)
        except ClientError as e:
            if e.status == 404:
                return True
            raise
        return False


def _phase(job: TrainingJob | None) -> str | None:
    return job.status.phase.value if job and job.status and job.status.phase else None


def _reached(job: TrainingJob, phases: Collection[str], condition: str | None) -> bool:
    if condition is not None:
        conditions = job.status.conditions if job.status else []
        return any(c.type == condition and c.status == "True" for c in conditions)
    return _phase(job) in phases


def _goal(phases: Collection[str], condition: str | None) -> str:
    return f"condition {condition}=True" if condition else "phase " + "/".join(phases)
