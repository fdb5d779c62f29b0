"""The user-side Kubernetes connection: the only module of `multinode.client` that imports the client library.

Why a second client next to controller/kube.py: that one is the operator's (its identity, its thread pool,
its async writes, its error counting); a notebook or a terminal needs kubeconfig contexts, reads, watches
and log streams, synchronously. Like the operator's, what leaves this module is plain dicts, lines of text
and `ClientError`; the library's own types stay inside, so the rest of the client and the CLI are tested
with plain values.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import urllib3
from kubernetes import client, config, watch

from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION


class ClientError(Exception):
    """A call to the apiserver failed. `status` is the HTTP status (None when no answer came); `message`
    is the apiserver's own message, which names the object or the offending field."""

    def __init__(self, operation: str, status: int | None, message: str):
        super().__init__(f"{operation}: {message}" if status is None else f"{operation}: {status}: {message}")
        self.operation, self.status, self.message = operation, status, message


def _error(operation: str, e: Exception) -> ClientError:
    if isinstance(e, client.ApiException):
        try:
            message = json.loads(e.body or "{}").get("message") or str(e.reason)
        except (TypeError, ValueError):
            message = str(e.reason)
        return ClientError(operation, e.status, message)
    return ClientError(operation, None, f"{type(e).__name__}: {e}")


# What a failed call raises besides ApiException: no answer (refused, reset, timed out).
_TRANSPORT_ERRORS = (client.ApiException, urllib3.exceptions.HTTPError, OSError)


class Kube:
    """One user's connection, as kubectl makes it: a kubeconfig file and context, or the pod's service
    account when run in-cluster with neither given."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None):
        configuration = client.Configuration()
        try:
            if kubeconfig is None and context is None:
                try:
                    config.load_incluster_config(client_configuration=configuration)
                except config.ConfigException:
                    config.load_kube_config(client_configuration=configuration)
            else:
                config.load_kube_config(config_file=kubeconfig, context=context,
                                        client_configuration=configuration)
        except (config.ConfigException, OSError) as e:
            raise ClientError("load kubeconfig", None, str(e)) from e
        self._api = client.ApiClient(configuration)
        self._custom = client.CustomObjectsApi(self._api)
        self._core = client.CoreV1Api(self._api)
        self.default_namespace = _kubeconfig_namespace(kubeconfig, context)

    # TrainingJobs ------------------------------------------------------------------------------------

    def create_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return cast(dict[str, Any], self._custom.create_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                                     PLURAL, body))
        except _TRANSPORT_ERRORS as e:
            raise _error("create TrainingJob", e) from e

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return cast(dict[str, Any], self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                                  name))
        except _TRANSPORT_ERRORS as e:
            raise _error(f"get TrainingJob {namespace}/{name}", e) from e

    def annotate_job(self, namespace: str, name: str, annotations: dict[str, str]) -> dict[str, Any]:
        """Merge-patch the job's annotations (its spec and status are not touched)."""
        try:
            return cast(dict[str, Any], self._custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"annotations": annotations}}))
        except _TRANSPORT_ERRORS as e:
            raise _error(f"annotate TrainingJob {namespace}/{name}", e) from e

    def list_jobs(self, namespace: str, timeout: float | None = None) -> list[dict[str, Any]]:
        """`timeout` in seconds (None: wait as long as the connection lasts)."""
        try:
            if timeout is None:
                found = self._custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
            else:
                found = self._custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                                   _request_timeout=timeout)
            return cast(list[dict[str, Any]], cast(dict[str, Any], found)["items"])
        except _TRANSPORT_ERRORS as e:
            raise _error(f"list TrainingJobs in {namespace}", e) from e

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self._custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                         propagation_policy="Background")
        except _TRANSPORT_ERRORS as e:
            raise _error(f"delete TrainingJob {namespace}/{name}", e) from e

    def watch_job(self, namespace: str, name: str, timeout_seconds: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """(event type, object) of one job: the current state first (a watch from no resourceVersion starts
        with ADDED), then every change, until `timeout_seconds` (the server ends the watch)."""
        w = watch.Watch()
        try:
            for event in w.stream(self._custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                                  field_selector=f"metadata.name={name}", timeout_seconds=max(1, timeout_seconds)):
                yield event["type"], event["object"]
        except _TRANSPORT_ERRORS as e:
            raise _error(f"watch TrainingJob {namespace}/{name}", e) from e
        finally:
            w.stop()

    # Pods --------------------------------------------------------------------------------------------

    def list_job_pods(self, namespace: str, job: str) -> tuple[list[dict[str, Any]], str]:
        """The job's pods as JSON dicts (node pods and the mirror), and the list's resourceVersion."""
        try:
            # _preload_content=False: the raw response (typed as the model list it is not), parsed once here.
            response: Any = self._core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={job}",
                                                           _preload_content=False)
            data = json.loads(response.data)
        except _TRANSPORT_ERRORS as e:
            raise _error(f"list pods of {namespace}/{job}", e) from e
        return data["items"], data["metadata"].get("resourceVersion", "")

    def watch_job_pods(self, namespace: str, job: str, resource_version: str,
                       timeout_seconds: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """Pod events after `resource_version`, as (type, JSON dict), for `timeout_seconds`."""
        w = watch.Watch()
        try:
            for event in w.stream(self._core.list_namespaced_pod, namespace,
                                  label_selector=f"{LABEL_JOB_NAME}={job}", resource_version=resource_version,
                                  timeout_seconds=max(1, timeout_seconds)):
                # The raw JSON object, the same shape the list returns (not the library's V1Pod).
                yield event["type"], event["raw_object"]
        except _TRANSPORT_ERRORS as e:
            raise _error(f"watch pods of {namespace}/{job}", e) from e
        finally:
            w.stop()

    def pod_log_lines(self, namespace: str, pod: str, container: str, *, follow: bool,
                      since_seconds: int | None = None, tail_lines: int | None = None) -> Iterator[str]:
        """The container's log, line by line, as it is written when `follow` (until the container exits)."""
        kwargs: dict[str, Any] = {"container": container, "follow": follow, "_preload_content": False}
        if since_seconds is not None:
            kwargs["since_seconds"] = since_seconds
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        try:
            # With _preload_content=False this is the streaming HTTP response, not the str it is typed as.
            response: Any = self._core.read_namespaced_pod_log(pod, namespace, **kwargs)
        except _TRANSPORT_ERRORS as e:
            raise _error(f"logs of {namespace}/{pod}", e) from e
        pending = b""
        try:
            for chunk in response.stream(4096, decode_content=False):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", errors="replace")
            if pending:
                yield pending.decode("utf-8", errors="replace")
        except _TRANSPORT_ERRORS as e:
            raise _error(f"logs of {namespace}/{pod}", e) from e
        finally:
            response.release_conn()


def _kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's (chosen or current) context, as kubectl defaults to; else the
    pod's own when in-cluster; else `default`."""
    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError, TypeError):
        try:
            with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
                return f.read().strip() or "default"
        except OSError:
            return "default"
    chosen = next((c for c in contexts if c["name"] == context), None) if context else current
    return ((chosen or {}).get("context") or {}).get("namespace") or "default"
