"""Typed stores of what the informers watch (watches.py fills them, observe.py and the event side read them).

Each store owns its WatchIndex (watch_index.py) and decides, in its `keys_of`, under which keys an object is
filed; callers read it through methods that say what they want (`PodStore.of_job`, `ByName.named`),
never through key shapes. Every read is a lookup by key: a reconcile costs O(its own pods), never a walk of
every pod, node or job (the 1000- and 10 000-node benchmarks depend on it). A key other than a job's
(namespace, name) is a frozen dataclass of its own, which no tuple equals.

Values are the planner's observed types (reconcile/): an object the operator's job does not control is
filed like the others (by label) and left out by the reads that take the job's uid (reconcile/ownership.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from multinode.api import LABEL_JOB_NAME
from multinode.controller.watch_index import WatchIndex
from multinode.reconcile import ObservedMirror, ObservedPod, observe_mirror_pod, observe_pod
from multinode.reconcile.integration import Integration, Watch
from multinode.reconcile.kinds import ApiKind
from multinode.reconcile.ownership import OwnedName, controller_uid
from multinode.reconcile.placement import ObservedNode, observe_node

JobKey = tuple[str, str]  # (namespace, name) of a TrainingJob


@dataclass(frozen=True, slots=True)
class OnNode:
    """PodStore's key of the jobs with a pod (or mirror) bound to `node`."""

    node: str


@dataclass(frozen=True, slots=True)
class ResumesFrom:
    """JobStore's key of the jobs whose spec.checkpointing.resumeFrom.trainingJob is `source`."""

    namespace: str
    source: str


def _first(values: Any) -> Any:
    """The one value filed under a key (these stores file one object per key), or None."""
    for value in values or ():
        return value
    return None


def resume_source(job: Mapping[str, Any]) -> str | None:
    """The job a TrainingJob's body resumes from (spec.checkpointing.resumeFrom.trainingJob), if any."""
    return ((((job.get("spec") or {}).get("checkpointing") or {}).get("resumeFrom") or {}).get("trainingJob")
            or None)


class JobStore:
    """The TrainingJobs' bodies by (namespace, name), and by the job each resumes from: a checkpointed job's
    reconcile finds the jobs resuming from it with one lookup, not a walk of every job."""

    def __init__(self) -> None:
        self.index = WatchIndex()

    @staticmethod
    def keys_of(job: dict) -> dict[Any, Any]:
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        entries: dict[Any, Any] = {(namespace, name): job}
        source = resume_source(job)
        if source is not None and source != name:  # a job resuming from itself is not its own resumer
            entries[ResumesFrom(namespace, source)] = job
        return entries

    def file(self, job: dict) -> None:
        """File `job` (a body read by a LIST) as its watch event would."""
        self.index.put(job["metadata"]["uid"], self.keys_of(job))

    def get(self, key: JobKey) -> dict | None:
        return cast(dict | None, _first(self.index.get(key)))

    def keys(self, namespace: str | None = None) -> list[JobKey]:
        """Every job's key (of one namespace, if given). O(jobs): for re-lists, never per reconcile."""
        return [cast(JobKey, key) for key in list(self.index)
                if isinstance(key, tuple) and (namespace is None or key[0] == namespace)]

    def resumers_of(self, namespace: str, name: str) -> list[dict]:
        """The bodies of the jobs of `namespace` that resume from job `name`."""
        return list(self.index.get(ResumesFrom(namespace, name)) or ())

    def uids(self) -> Iterator[tuple[str, JobKey]]:
        """(uid, key) of every job held."""
        for key in self.keys():
            for uid in self.index.uids(key):
                yield uid, key

    def holds(self, uid: str) -> bool:
        return bool(self.index.keys_of_uid(uid))

    def key_of(self, uid: str) -> JobKey | None:
        return next((cast(JobKey, k) for k in self.index.keys_of_uid(uid) if isinstance(k, tuple)), None)

    def remove(self, uid: str) -> None:
        self.index.remove(uid)


class PodStore:
    """The jobs' node pods and mirror pods (two informers, two indices), each filed under its job and, once
    bound, under its node: a node's Ready change finds the jobs it concerns without walking every pod."""

    def __init__(self) -> None:
        self.node_pods = WatchIndex()
        self.mirrors = WatchIndex()

    @staticmethod
    def node_pod_keys(pod: dict) -> dict[Any, Any]:
        observed = observe_pod(pod)
        return {} if observed is None else PodStore.pod_entries(pod["metadata"]["namespace"], observed)

    @staticmethod
    def mirror_keys(pod: dict) -> dict[Any, Any]:
        mirror = observe_mirror_pod(pod)
        return {} if mirror is None else PodStore.pod_entries(pod["metadata"]["namespace"], mirror)

    @staticmethod
    def pod_entries(namespace: str, pod: ObservedPod | ObservedMirror) -> dict[Any, Any]:
        key = (namespace, pod.job_name)
        return {key: pod, OnNode(pod.node): key} if pod.node else {key: pod}

    def put_pod(self, namespace: str, pod: ObservedPod, uid: str | None = None) -> None:
        """File an observed node pod (by default under a uid made of its name)."""
        self.node_pods.put(uid or f"{namespace}/{pod.name}", self.pod_entries(namespace, pod))

    def put_mirror(self, namespace: str, mirror: ObservedMirror, uid: str | None = None) -> None:
        self.mirrors.put(uid or f"{namespace}/{mirror.name}", self.pod_entries(namespace, mirror))

    def of_job(self, namespace: str, job: str, owner_uid: str | None) -> list[ObservedPod]:
        """The node pods of job `job` that the job `owner_uid` controls."""
        return [p for p in self.node_pods.get((namespace, job)) or () if p.owner_uid == owner_uid]

    def mirror_of(self, namespace: str, job: str, owner_uid: str | None) -> ObservedMirror | None:
        return cast(ObservedMirror | None, _first(
            [m for m in self.mirrors.get((namespace, job)) or () if m.owner_uid == owner_uid]))

    def on_node(self, node: str) -> set[JobKey]:
        """The jobs with a node pod or a mirror bound to `node`."""
        return {*(self.node_pods.get(OnNode(node)) or ()), *(self.mirrors.get(OnNode(node)) or ())}


class Owned(Protocol):
    @property
    def owner_uid(self) -> str | None: ...


T = TypeVar("T", bound=Owned)


@dataclass(frozen=True)
class JobObjects(Generic[T]):
    """Objects a job owns and the operator watches (its Service, PodGroups, Kueue Workload), under (namespace,
    job): `observe` turns one into (the job it is labelled with, its observed value), or None."""

    observe: Callable[[dict], tuple[str, T] | None]
    index: WatchIndex = field(default_factory=WatchIndex)

    def keys_of(self, obj: dict) -> dict[Any, Any]:
        observed = self.observe(obj)
        return {} if observed is None else {(obj["metadata"]["namespace"], observed[0]): observed[1]}

    def put(self, namespace: str, job: str, value: T, uid: str) -> None:
        self.index.put(uid, {(namespace, job): value})

    def of_job(self, namespace: str, job: str, owner_uid: str | None) -> list[T]:
        """Those the job `owner_uid` controls."""
        return [v for v in self.index.get((namespace, job)) or () if v.owner_uid == owner_uid]


def observe_service(service: dict) -> tuple[str, OwnedName] | None:
    meta = service["metadata"]
    job = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
    return (job, OwnedName(meta["name"], controller_uid(meta))) if job else None


class JobNamed(Owned, Protocol):
    @property
    def job_name(self) -> str: ...


J = TypeVar("J", bound=JobNamed)


def by_job_name(observe: Callable[[dict], J | None]) -> Callable[[dict], tuple[str, J] | None]:
    """`observe` for JobObjects, for kinds whose observed value names its job (an integration's: PodGroups,
    Workloads)."""
    def observed(obj: dict) -> tuple[str, J] | None:
        value = observe(obj)
        return None if value is None else (value.job_name, value)
    return observed


V = TypeVar("V")


@dataclass(frozen=True)
class ByName(Generic[V]):
    """Cluster-scoped objects by name, as `observe` sees them: the nodes, an integration's (Kueue's
    ResourceFlavors)."""

    observe: Callable[[dict], V]
    index: WatchIndex = field(default_factory=WatchIndex)

    def keys_of(self, obj: dict) -> dict[Any, Any]:
        return {obj["metadata"]["name"]: self.observe(obj)}

    def put(self, name: str, value: V) -> None:
        self.index.put(name, {name: value})

    def named(self, name: str) -> V | None:
        return cast("V | None", _first(self.index.get(name)))

    def all(self) -> tuple[V, ...]:
        """Every one: O(objects), for the nodes read only by jobs that plan with them (placement.needs_nodes)."""
        return tuple(value for name in list(self.index) for value in self.index[name])


@dataclass(frozen=True)
class Stores:
    """Everything the informers keep: what every reconcile reads instead of a GET."""

    jobs: JobStore = field(default_factory=JobStore)
    pods: PodStore = field(default_factory=PodStore)
    nodes: ByName[ObservedNode] = field(default_factory=lambda: ByName(observe_node))
    services: JobObjects[OwnedName] = field(default_factory=lambda: JobObjects(observe_service))
    # What the integrations watch (reconcile/integration.py Watch), by kind: objects a job owns (PodGroups,
    # Workloads), and cluster objects by name (ResourceFlavors). `for_integrations` makes one per watch.
    owned: Mapping[ApiKind, JobObjects[Any]] = field(default_factory=dict)
    named: Mapping[ApiKind, ByName[Any]] = field(default_factory=dict)

    @classmethod
    def for_integrations(cls, integrations: Iterable[Integration]) -> Stores:
        watches: list[Watch] = [w for i in integrations for w in i.watches]
        return cls(owned={w.kind: JobObjects(by_job_name(w.observe)) for w in watches if w.owned},
                   named={w.kind: ByName(w.observe) for w in watches if not w.owned})
