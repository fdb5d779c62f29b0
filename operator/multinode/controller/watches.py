"""The operator's watches (informer.py) of everything it reads, filing objects into the typed stores
(stores.py) and marking the jobs they concern dirty through the Enqueue interface (enqueue.py); handlers.py
says why these watches and not kopf's.

Each watch answers for itself: a namespace's jobs are planned once that namespace's watches have listed
(NamespacedWatches.ready), and nothing else waits. Per followed namespace (or cluster-wide when the operator
follows every namespace), one informer per NamespacedKind: TrainingJobs, node pods, mirror pods, Services,
and the objects the integrations own where the apiserver serves them (PodGroups, Workloads). Cluster-scoped:
nodes, and the integrations' cluster objects (Kueue's ResourceFlavors).
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, cast

from multinode.api import LABEL_JOB_NAME, LABEL_MIRROR_OF
from multinode.controller.enqueue import Enqueue
from multinode.controller.informer import Informer, OnEvent, wait_synced
from multinode.controller.kube import KubeApi
from multinode.controller.stores import ByName, JobStore, PodStore, resume_source
from multinode.controller.watch_index import KeysOf, WatchIndex
from multinode.reconcile.kinds import ApiKind
from multinode.reconcile.placement import ObservedNode


log = logging.getLogger("multinode.controller")

# A pod's events mark its job dirty this long before the reconcile, so that the events of a job's pods in
# that window cost one reconcile: each pod goes through several events on its way to Running. With this and
# the echo below, a job of 8 pods took about 12 reconciles over its start and deletion instead of about 41
# (docs/benchmarks.md, "Throughput"). Kubernetes' Job controller batches its pods' updates the same way
# (for one second).
POD_EVENT_BATCH_SECONDS = 0.5
# A big job's window grows with it, up to the Job controller's second at BIG_JOB_NODES: its pods' events
# come by the hundred a second all through its start, and each of its reconciles is O(pods) and writes its
# status (the ready count moved), so its start took a reconcile every half second (docs/benchmarks.md,
# "CPU per start"). Its status says the count that much later, and a failed pod is acted on that much later
# too: half a second more, on a job whose restart takes minutes.
MAX_POD_EVENT_BATCH_SECONDS = 1.0
BIG_JOB_NODES = 1000
START_WAIT_SECONDS = 30  # how long the first pass waits for named namespaces' objects (wait_started)


def job_event(r: Enqueue) -> OnEvent:
    """A TrainingJob changed: reconcile it; it went: forget what the operator kept of it. The version our own
    status patch made is not news to the job's reconcile (Enqueue.own_status_write), and is not reconciled
    again: the pass that wrote it queued the job itself if a pass after it has more to do
    (reconcile/follow_up.py). A job that resumes from another (resumeFrom.trainingJob) makes that one
    reconcile too: its status.resumedBy, which its mirror pins, follows where this job's attempt resumed from."""
    def on_event(kind: str, job: dict, entries: dict) -> None:
        meta = job.get("metadata") or {}
        echo = kind == "MODIFIED" and r.own_status_write(meta.get("uid") or "", meta.get("resourceVersion") or "")
        for key in entries:
            if not isinstance(key, tuple):
                continue  # the job is filed by the job it resumes from too (JobStore)
            if kind == "DELETED":
                r.forget(key, meta.get("uid"))
            elif not echo:
                r.enqueue(key)
        source = resume_source(job)
        namespace = meta.get("namespace")
        if source and namespace:
            r.enqueue((namespace, source))
    return on_event


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


def requeue_all(r: Enqueue, jobs: JobStore, namespace: str | None = None) -> None:
    """Mark every job dirty (or every job of one namespace): after a re-list, whose gap hid events, or a
    namespace's first list; the reconcile of each is level-based."""
    for key in jobs.keys(namespace):
        r.enqueue(key)


def owner_event(r: Enqueue) -> OnEvent:
    """An object a job owns changed (its Service, PodGroup, Workload): reconcile that job."""
    def on_event(kind: str, obj: dict, entries: dict) -> None:
        meta = obj["metadata"]
        job = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
        if job:
            r.enqueue((meta.get("namespace", ""), job))
    return on_event


def pod_event_batch_seconds(job: dict | None) -> float:
    """How long the events of `job`'s pods are folded together before its reconcile (None: a job not in the
    store yet, or gone)."""
    nodes = ((job or {}).get("spec") or {}).get("numNodes")
    if not isinstance(nodes, int):
        return POD_EVENT_BATCH_SECONDS
    return min(MAX_POD_EVENT_BATCH_SECONDS, max(POD_EVENT_BATCH_SECONDS,
                                                MAX_POD_EVENT_BATCH_SECONDS * nodes / BIG_JOB_NODES))


def pod_event(r: Enqueue, jobs: JobStore) -> OnEvent:
    """A node pod or a mirror pod changed: the store has it (or its deletion) now, so the job stops expecting
    it; a node pod deleted by a disruption leaves its reason behind (Enqueue.pod_gone)."""
    def on_event(kind: str, pod: dict, entries: dict) -> None:
        meta = pod["metadata"]
        namespace, labels = meta.get("namespace", ""), meta.get("labels") or {}
        job = labels.get(LABEL_JOB_NAME) or labels.get(LABEL_MIRROR_OF)
        if not job:
            return
        key = (namespace, job)
        gone = entries.get(key) if kind == "DELETED" and LABEL_JOB_NAME in labels else None
        if gone is not None and gone.disruption:
            r.pod_gone(key, meta["name"], gone.disruption)
        r.pod_seen(key, meta["name"])
        r.enqueue(key, delay=pod_event_batch_seconds(jobs.get(key)))
    return on_event


@dataclass(frozen=True)
class NamespacedKind:
    """One kind of object the operator watches in each namespace it follows: the collection's path under
    `/namespaces/<ns>` (or cluster-wide), the label every object of ours carries, where they are filed."""

    api: str  # "/api/v1", "/apis/<group>/<version>"
    plural: str
    label_selector: str | None  # None: every object of the kind (the TrainingJobs)
    index: WatchIndex
    keys_of: KeysOf
    on_event: OnEvent

    def path(self, namespace: str | None) -> str:
        return f"{self.api}/{self.plural}" if namespace is None else f"{self.api}/namespaces/{namespace}/{self.plural}"


CLUSTER = None  # NamespacedWatches' key for the cluster-wide watches


class NamespacedWatches:
    """The namespaced informers: one per NamespacedKind in each followed namespace, or cluster-wide when the
    operator follows every namespace.

    Under a glob the namespaces come and go: a watch of namespaces starts a set for each matching one and
    forgets it when it is deleted. Per namespace and not one cluster-wide watch filtered here, because an
    admin who grants the operator a Role per team namespace gives it no right to list pods cluster-wide
    (kopf follows globs the same way). A namespace the operator may not read keeps retrying on its own,
    and `ready(namespace)` stays false for it alone: the reconciler plans no job whose objects it has not
    listed (it would create pods that exist), and waits for nothing else.
    """

    def __init__(self, kube: KubeApi, namespaces: tuple[str, ...], kinds: list[NamespacedKind],
                 on_listed: Callable[[str | None], None]):
        self.kube, self.kinds, self.on_listed = kube, kinds, on_listed
        self.keep = namespace_matcher(namespaces)
        self.named = () if not namespaces or any(map(is_pattern, namespaces)) else namespaces
        self.by_namespace: dict[str | None, list[Informer]] = {}
        self.namespace_watch: Informer | None = None
        self.namespaces = WatchIndex()  # under a glob: the matching namespaces, by name
        self._listing: dict[str | None, asyncio.Task] = {}  # followed namespaces not listed yet
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
        if self.namespace_watch is not None:
            self.namespace_watch.stop()
        for informers in self.by_namespace.values():
            for informer in informers:
                informer.stop()

    def followed(self) -> list[str | None]:
        """The namespaces watched now (CLUSTER: every namespace)."""
        return list(self.by_namespace)

    def ready(self, namespace: str) -> bool:
        """Whether every kind of object of `namespace` is listed: the reconciler may plan its jobs."""
        informers = self.by_namespace.get(CLUSTER) or self.by_namespace.get(namespace) or []
        return bool(informers) and all(informer.synced.is_set() for informer in informers)

    async def wait_started(self) -> None:
        """What the reconciler waits for before its first pass: the namespaces listed under a glob, else the
        objects of every followed namespace, so an operator's first passes after a restart do not each wait
        on their own. A namespace still refused after a while is left to `ready`."""
        if self.namespace_watch is not None:
            await wait_synced([self.namespace_watch])
            return
        informers = [i for group in self.by_namespace.values() for i in group]
        try:
            await asyncio.wait_for(wait_synced(informers), timeout=START_WAIT_SECONDS)
        except TimeoutError:
            log.warning("%s not listed after %ds; their jobs wait, the others go on",
                        ", ".join(str(ns) for ns in self.by_namespace if not self.ready(str(ns))), START_WAIT_SECONDS)

    def _follow(self, namespace: str | None) -> None:
        if namespace in self.by_namespace:
            return
        informers = [Informer(self.kube, kind.path(namespace), kind.index, kind.keys_of,
                              label_selector=kind.label_selector, on_event=kind.on_event,
                              on_relisted=lambda: self.on_listed(namespace))
                     for kind in self.kinds]
        self.by_namespace[namespace] = informers
        for informer in informers:
            informer.start()
        self._listing[namespace] = asyncio.get_running_loop().create_task(self._once_listed(namespace, informers))

    async def _once_listed(self, namespace: str | None, informers: list[Informer]) -> None:
        # A refused namespace's informers say so themselves, with their backoff: nothing to log here.
        await asyncio.gather(*(informer.synced.wait() for informer in informers))
        self._listing.pop(namespace, None)
        self.on_listed(namespace)  # its jobs that waited for its objects (Reconciler.namespace_listed) go now

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


def node_informer(kube: KubeApi, nodes: ByName[ObservedNode], pods: PodStore, r: Enqueue, jobs: JobStore) -> Informer:
    """A node's Ready condition changed, it was cordoned or uncordoned, or it went: reconcile the jobs with pods
    on it, so a lost node restarts its gangs now rather than at their pods' eviction (reconcile/node_loss.py),
    and a drain finds them asking for a checkpoint (reconcile/disruption.py). Heartbeats that change nothing
    enqueue nothing."""
    ready_seen: dict[str, tuple[str, bool]] = {}

    def node_event(kind: str, node: dict, entries: dict) -> None:
        # A node deleted while not watched comes with its uid only: its name is its key (ByName.keys_of).
        name = node["metadata"].get("name") or next(iter(entries), "")
        state = ("Gone", False) if kind == "DELETED" else (entries[name].ready_status, entries[name].schedulable)
        if kind != "LISTED" and ready_seen.get(name, ("True", True)) != state:
            for key in pods.on_node(name):
                r.enqueue(key)
        if kind == "DELETED":
            ready_seen.pop(name, None)
        else:
            ready_seen[name] = state

    return Informer(kube, "/api/v1/nodes", nodes.index, nodes.keys_of, on_event=node_event,
                    on_relisted=lambda: requeue_all(r, jobs))


def named_informer(kube: KubeApi, kind: ApiKind, store: ByName[Any]) -> Informer:
    """An integration's cluster-scoped kind, by name (Kueue's ResourceFlavors, whose nodeLabels select an
    admitted job's nodes). Nothing is enqueued: a job waiting to read one comes back by itself (its Gate's
    wait)."""
    return Informer(kube, f"{kind.api}/{kind.plural}", store.index, store.keys_of)
