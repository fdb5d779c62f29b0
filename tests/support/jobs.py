"""Applying and watching TrainingJobs in tests (built with multinode.testing)."""

from __future__ import annotations

import re
import threading

import yaml
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from localcluster.harness.kube import kubectl
from localcluster.harness.waiting import wait_for

START_AFTER = "localcluster.multinode.dev/start-after"
FINISH_AFTER = "localcluster.multinode.dev/finish-after"
EXIT_CODE = "localcluster.multinode.dev/exit-code"


def apply(kubeconfig: str, namespace: str, manifest: dict) -> None:
    kubectl(kubeconfig, "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def get_job(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def job_gone(custom: client.CustomObjectsApi, namespace: str, name: str) -> bool:
    try:
        get_job(custom, namespace, name)
        return False
    except client.ApiException as e:
        if e.status == 404:
            return True
        raise


def job_pods(core: client.CoreV1Api, namespace: str, name: str) -> list:
    return core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={name}").items


def pod_env(core: client.CoreV1Api, pod: client.V1Pod, container: int = 0) -> dict[str, str | None]:
    """A container's env as the kubelet builds it from the stored pod: each envFrom ConfigMap (read from
    the apiserver: the attempt's shared env) first, then the pod's own `env`. A downward API value of the pod's
    metadata is read from the pod (an in-place pod's attempt values are its annotations); any other valueFrom
    maps to None."""
    c = pod.spec.containers[container]
    env: dict[str, str | None] = {}
    for source in c.env_from or []:
        data = core.read_namespaced_config_map(source.config_map_ref.name, pod.metadata.namespace).data or {}
        env.update(data)
    env.update({e.name: _metadata_field(pod, e.value_from) if e.value_from else e.value for e in c.env or []})
    return env


_ANNOTATION = re.compile(r"metadata\.annotations\['([^']+)'\]")


def _metadata_field(pod: client.V1Pod, value_from: client.V1EnvVarSource) -> str | None:
    """What the kubelet puts in a fieldRef variable of the pod's annotations, name or namespace; else None."""
    path = value_from.field_ref.field_path if value_from.field_ref else ""
    annotation = _ANNOTATION.fullmatch(path or "")
    if annotation:
        return (pod.metadata.annotations or {}).get(annotation.group(1), "")
    return {"metadata.name": pod.metadata.name, "metadata.namespace": pod.metadata.namespace}.get(path or "")


def wait_phase(custom: client.CustomObjectsApi, namespace: str, name: str, phase: str, timeout: float = 60) -> dict:
    last: dict = {}

    def probe():
        job = get_job(custom, namespace, name)
        last["status"] = job.get("status")
        return job if (job.get("status") or {}).get("phase") == phase else None

    try:
        return wait_for(probe, timeout=timeout, what=f"TrainingJob {namespace}/{name} phase {phase}")
    except AssertionError as e:   # the status it had instead says where it stuck
        raise AssertionError(f"{e}\nits status: {last.get('status')!r}") from None


def condition(job: dict, type_: str) -> dict | None:
    return next((c for c in (job.get("status") or {}).get("conditions", []) if c["type"] == type_), None)


class PhaseRecorder:
    """Records every status.phase a job passes through, from a watch stream (no change is missed), and every
    condition it showed (a transient one, like Progressing=False/Hung before a restart, included)."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, timeout_seconds: int = 120):
        self.phases: list[str] = []
        self.conditions: list[dict] = []
        self._seen_version: str | None = None
        self._timeout = timeout_seconds
        self._watch = watch.Watch()
        self._custom = client.CustomObjectsApi(api)
        self._args = (GROUP, VERSION, namespace, PLURAL)
        self._name = name
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PhaseRecorder:
        self._thread.start()
        return self

    def _run(self) -> None:
        stream = self._watch.stream(self._custom.list_namespaced_custom_object, *self._args,
                                    field_selector=f"metadata.name={self._name}", timeout_seconds=self._timeout)
        try:
            for event in stream:
                self._seen_version = (event["object"].get("metadata") or {}).get("resourceVersion")
                for c in (event["object"].get("status") or {}).get("conditions") or []:
                    if c not in self.conditions:
                        self.conditions.append(c)
                phase = (event["object"].get("status") or {}).get("phase")
                if phase and (not self.phases or self.phases[-1] != phase):
                    self.phases.append(phase)
        except ProtocolError:
            pass  # __exit__ closed the stream under us

    def _caught_up(self) -> bool:
        """Whether the stream has brought the job as the apiserver holds it now (or the job is gone)."""
        try:
            now = self._custom.get_namespaced_custom_object(*self._args, self._name)
        except client.ApiException as e:
            if e.status == 404:
                return True
            raise
        return self._seen_version == now["metadata"]["resourceVersion"]

    def __exit__(self, exc_type, *exc) -> None:
        # The test's own wait (kubectl wait, a GET) can see a status before this stream brings it: the phases
        # are read after the block, so it first waits for the stream to reach the job's current version.
        try:
            if exc_type is None:
                wait_for(self._caught_up, timeout=30, what=f"the watch of {self._name} to bring its latest status")
        finally:
            self._watch.stop()
