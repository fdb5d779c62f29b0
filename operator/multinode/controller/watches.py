"""The operator's own watches of pods and nodes (informer.py), filing them into the reconciler's indices and
marking the jobs they concern dirty: what kopf's pod and node indices and event handlers did before.

Pods: two watches per followed namespace (or cluster-wide), see PodWatches. Nodes: one cluster-wide watch.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from collections.abc import Callable, Hashable
from typing import Any, cast

from multinode.api import LABEL_JOB_NAME, LABEL_MIRROR_OF
from multinode.controller.index_keys import mirror_key, node_jobs_key
from multinode.controller.informer import Informer, wait_synced
from multinode.controller.kube import KubeApi
from multinode.controller.watch_index import WatchIndex
from multinode.controller.worker import JobKey, Reconciler
from multinode.reconcile import observe_mirror_pod, observe_pod
from multinode.reconcile.placement import observe_node


log = logging.getLogger("multinode.controller")

START_WAIT_SECONDS = 30  # how long the first pass waits for named namespaces' pods (PodWatches.wait_started)


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


def is_pattern(namespace: str) -> bool:
    """A kopf namespace glob ("team-*", "!team-skip")."""
    return bool(set(namespace) & set("*?!["))


def namespace_matcher(namespaces: tuple[str, ...]) -> Callable[[str], bool]:
    """Which namespaces a list of names and globs follows (kopf's rules: `!` excludes; none given: all)."""
    include = [p for p in namespaces if not p.startswith("!")]
    exclude = [p[1:] for p in namespaces if p.startswith("!")]

    def keep(ns: str) -> bool:
        return ((not include or any(fnmatch.fnmatchcase(ns, p) for p in include))
                and not any(fnmatch.fnmatchcase(ns, p) for p in exclude))
    return keep


def requeue_all(r: Reconciler, namespace: str | None = None) -> None:
    """Mark every job dirty (or every job of one namespace): after a re-list, whose gap hid events, or a
    namespace's first list; the reconcile of each is level-based."""
    for key in list(r.indices.jobs):
        if namespace is None or cast(JobKey, key)[0] == namespace:
            r.queue.add(cast(JobKey, key))


CLUSTER = None  # PodWatches' key for the cluster-wide watches


class PodWatches:
    """The pod informers: two per followed namespace, or two cluster-wide when the operator follows every
    namespace, one for each label a pod of ours carries (the node pods, LABEL_JOB_NAME, and the checkpoint
    mirrors, LABEL_MIRROR_OF), so pods of other software never reach the operator.

    Under a glob the namespaces come and go: a watch of namespaces starts a pair for each matching one and
    forgets it when it is deleted. Per namespace and not one cluster-wide watch filtered here, because an
    admin who grants the operator a Role per team namespace gives it no right to list pods cluster-wide
    (kopf follows globs the same way). A namespace the operator may not read keeps retrying on its own,
    and `ready(namespace)` stays false for it alone: the reconciler plans no job whose pods it has not
    listed (it would create pods that exist), and waits for nothing else.
    """

    def __init__(self, kube: KubeApi, namespaces: tuple[str, ...], pods: WatchIndex, r: Reconciler):
        self.kube, self.pods, self.r = kube, pods, r
        self.keep = namespace_matcher(namespaces)
        self.named = () if not namespaces or any(map(is_pattern, namespaces)) else namespaces
        self.by_namespace: dict[str | None, list[Informer]] = {}
        self.namespace_watch: Informer | None = None
        self.namespaces = WatchIndex()  # under a glob: the matching namespaces, by name
        self._listing: dict[str, asyncio.Task] = {}  # namespaces followed whose pods are not listed yet
        if namespaces and not self.named:
            self.namespace_watch = Informer(kube, "/api/v1/namespaces", self.namespaces, self._followed,
                                            on_event=self._namespace_event, on_relisted=self._namespaces_relisted)

    def start(self) -> None:
        """On the event loop."""
        if self.namespace_watch is not None:
            self.namespace_watch.start()
        elif self.named:
            for namespace in self.named:
                self._follow(namespace)
        else:
            self._follow(CLUSTER)

    def stop(self) -> None:
        for listing in self._listing.values():
            listing.cancel()
        for informer in [*(self.namespace_watch,), *(i for pair in self.by_namespace.values() for i in pair)]:
            if informer is not None:
                informer.stop()

    def ready(self, namespace: str) -> bool:
        """Whether the pods of `namespace` are listed: the reconciler may plan its jobs."""
        pair = self.by_namespace.get(CLUSTER) or self.by_namespace.get(namespace) or []
        return bool(pair) and all(informer.synced.is_set() for informer in pair)

    async def wait_started(self) -> None:
        """What the reconciler waits for before its first pass: the namespaces listed under a glob, else the
        pods of every followed namespace, so an operator's first passes after a restart do not each wait
        on their own. A namespace still refused after a while is left to `ready`."""
        if self.namespace_watch is not None:
            await wait_synced([self.namespace_watch])
            return
        informers = [i for pair in self.by_namespace.values() for i in pair]
        try:
            await asyncio.wait_for(wait_synced(informers), timeout=START_WAIT_SECONDS)
        except TimeoutError:
            log.warning("pods of %s not listed after %ds; their jobs wait, the others go on", ", ".join(
                str(ns) for ns, pair in self.by_namespace.items() if not all(i.synced.is_set() for i in pair)),
                START_WAIT_SECONDS)

    def _follow(self, namespace: str | None) -> None:
        if namespace in self.by_namespace:
            return
        prefix = "/api/v1" if namespace is CLUSTER else f"/api/v1/namespaces/{namespace}"
        pair = [Informer(self.kube, f"{prefix}/pods", self.pods, keys_of, label_selector=label,
                         on_event=self._pod_event, on_relisted=lambda: requeue_all(self.r))
                for label, keys_of in ((LABEL_JOB_NAME, node_pod_keys), (LABEL_MIRROR_OF, mirror_pod_keys))]
        self.by_namespace[namespace] = pair
        for informer in pair:
            informer.start()
        if namespace is not CLUSTER:  # its jobs that waited for its pods (Reconciler.pods_listed) go now
            self._listing[namespace] = asyncio.get_running_loop().create_task(
                self._requeue_once_listed(namespace, pair))

    async def _requeue_once_listed(self, namespace: str, pair: list[Informer]) -> None:
        # A refused namespace's informers say so themselves, with their backoff: nothing to log here.
        await asyncio.gather(*(informer.synced.wait() for informer in pair))
        self._listing.pop(namespace, None)
        requeue_all(self.r, namespace)

    def _unfollow(self, namespace: str) -> None:
        listing = self._listing.pop(namespace, None)
        if listing is not None:
            listing.cancel()
        for informer in self.by_namespace.pop(namespace, ()):
            informer.forget()

    def _followed(self, namespace: dict) -> dict[Hashable, Any]:
        name = namespace["metadata"]["name"]
        return {name: True} if self.keep(name) else {}

    def _namespace_event(self, kind: str, namespace: dict, entries: dict) -> None:
        name = namespace["metadata"]["name"]
        if kind == "DELETED":
            self._unfollow(name)
        elif entries:
            self._follow(name)

    def _namespaces_relisted(self) -> None:
        """Namespace events were missed: the new LIST (in self.namespaces now) says which to follow."""
        for followed in [ns for ns in self.by_namespace if ns is not CLUSTER and ns not in self.namespaces]:
            self._unfollow(followed)
        for name in list(self.namespaces):
            self._follow(cast(str, name))

    def _pod_event(self, kind: str, pod: dict, entries: dict) -> None:
        meta = pod["metadata"]
        namespace, labels = meta.get("namespace", ""), meta.get("labels") or {}
        job = labels.get(LABEL_JOB_NAME) or labels.get(LABEL_MIRROR_OF)
        if not job:
            return
        key = (namespace, job)
        gone = entries.get(key) if kind == "DELETED" and LABEL_JOB_NAME in labels else None
        if gone is not None and gone.disruption:
            self.r.pod_gone(key, meta["name"], gone.disruption)
        self.r.pod_seen(key, meta["name"])
        self.r.queue.add(key)


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
