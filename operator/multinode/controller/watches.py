"""The operator's own watches of pods and nodes (informer.py), filing them into the reconciler's indices and
marking the jobs they concern dirty: what kopf's pod and node indices and event handlers did before.

Pods: two watches per watched namespace (or cluster-wide), one for each label a pod of ours carries: the
node pods (LABEL_JOB_NAME) and the checkpoint mirrors (LABEL_MIRROR_OF), so pods of other software are
never sent to the operator. Nodes: one cluster-wide watch.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Hashable
from typing import Any, cast

from multinode.api import LABEL_JOB_NAME, LABEL_MIRROR_OF
from multinode.controller.index_keys import mirror_key, node_jobs_key
from multinode.controller.informer import Informer
from multinode.controller.kube import KubeApi
from multinode.controller.watch_index import WatchIndex
from multinode.controller.worker import JobKey, Reconciler
from multinode.reconcile import observe_mirror_pod, observe_pod
from multinode.reconcile.placement import observe_node


def node_pod_keys(pod: dict) -> dict[Hashable, Any]:
    """A node pod under (namespace, job), and its job under its node's key (node_jobs_key)."""
    observed = observe_pod(pod)
    if observed is None:
        return {}
    key = (pod["metadata"]["namespace"], observed.job_name)
    return {key: observed, node_jobs_key(observed.node): key} if observed.node else {key: observed}


def mirror_pod_keys(pod: dict) -> dict[Hashable, Any]:
    mirror = observe_mirror_pod(pod)
    return {} if mirror is None else {mirror_key(pod["metadata"]["namespace"], mirror.job_name): mirror}


def node_keys(node: dict) -> dict[Hashable, Any]:
    """All nodes under None (jobs with spec.topology read them at an attempt's start), each under its name
    (node_loss looks up the nodes of a job's pods)."""
    observed = observe_node(node)
    return {None: observed, node["metadata"]["name"]: observed}


def namespace_filter(namespaces: tuple[str, ...]) -> tuple[list[str], Callable[[str], bool]]:
    """Where to watch (API path prefixes) and which namespaces to keep: one watch per named namespace; a
    cluster-wide watch filtered here when none is named or one is a pattern (kopf's globs, `!` excluding)."""
    if namespaces and not any(set(ns) & set("*?![") for ns in namespaces):
        return [f"/api/v1/namespaces/{ns}" for ns in namespaces], lambda ns: True
    include = [p for p in namespaces if not p.startswith("!")]
    exclude = [p[1:] for p in namespaces if p.startswith("!")]

    def keep(ns: str) -> bool:
        return ((not include or any(fnmatch.fnmatchcase(ns, p) for p in include))
                and not any(fnmatch.fnmatchcase(ns, p) for p in exclude))
    return ["/api/v1"], keep


def _filtered(keys_of: Callable[[dict], dict[Hashable, Any]], keep: Callable[[str], bool]):
    return lambda pod: keys_of(pod) if keep(pod["metadata"].get("namespace", "")) else {}


def requeue_all(r: Reconciler) -> None:
    """Mark every job dirty: after a re-list, whose gap hid events, the reconcile of each is level-based."""
    for key in list(r.indices.jobs):
        r.queue.add(cast(JobKey, key))


def pod_informers(kube: KubeApi, namespaces: tuple[str, ...], pods: WatchIndex, r: Reconciler) -> list[Informer]:
    prefixes, keep = namespace_filter(namespaces)

    def pod_event(kind: str, pod: dict, entries: dict) -> None:
        meta = pod["metadata"]
        namespace, labels = meta.get("namespace", ""), meta.get("labels") or {}
        job = labels.get(LABEL_JOB_NAME) or labels.get(LABEL_MIRROR_OF)
        if not job or not keep(namespace):
            return
        key = (namespace, job)
        gone = entries.get(key) if kind == "DELETED" and LABEL_JOB_NAME in labels else None
        if gone is not None and gone.disruption:
            r.pod_gone(key, meta["name"], gone.disruption)
        r.pod_seen(key, meta["name"])
        r.queue.add(key)

    def relisted() -> None:  # events were missed: every job is looked at again
        requeue_all(r)

    return [Informer(kube, f"{prefix}/pods", pods, _filtered(keys_of, keep), label_selector=label,
                     on_event=pod_event, on_relisted=relisted)
            for prefix in prefixes
            for label, keys_of in ((LABEL_JOB_NAME, node_pod_keys), (LABEL_MIRROR_OF, mirror_pod_keys))]


def node_informer(kube: KubeApi, nodes: WatchIndex, r: Reconciler) -> Informer:
    """A node's Ready condition changed (or the node went): reconcile the jobs with pods on it, so a lost
    node restarts its gangs now rather than at their pods' eviction (reconcile/node_loss.py). Heartbeats
    that change nothing enqueue nothing."""
    ready_seen: dict[str, str] = {}

    def node_event(kind: str, node: dict, entries: dict) -> None:
        name = node["metadata"]["name"]
        state = "Gone" if kind == "DELETED" else entries[name].ready_status
        if kind != "LISTED" and ready_seen.get(name, "True") != state:
            for key in set(r.indices.pods.get(node_jobs_key(name)) or ()):
                r.queue.add(key)
        if kind == "DELETED":
            ready_seen.pop(name, None)
        else:
            ready_seen[name] = state

    return Informer(kube, "/api/v1/nodes", nodes, node_keys, on_event=node_event,
                    on_relisted=lambda: requeue_all(r))
