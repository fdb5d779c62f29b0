"""Where the operator's own namespaced watches look, and what they keep (controller/watches.py), against a
fake of KubeApi's two blocking calls that answers by path: the real apiserver's per-namespace refusals are
in tests/integration/controller/test_watch_readiness.py."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest

from multinode.api import LABEL_JOB_NAME
from multinode.controller.kube import ApiError
from multinode.controller.handlers import namespaced_kinds
from multinode.controller.stores import JobKey, OnNode, PodStore, Stores
from multinode.controller.watches import (MAX_POD_EVENT_BATCH_SECONDS, POD_EVENT_BATCH_SECONDS, NamespacedWatches,
                                          job_event, namespace_matcher, node_informer, pod_event, requeue_all)
from tests.unit.controller.test_informer import until


def node_pod(namespace: str, job: str, index: int) -> dict:
    return {"metadata": {"name": f"{job}-{index}-a0", "namespace": namespace, "uid": f"{namespace}/{job}/{index}",
                         "resourceVersion": "5",
                         "labels": {LABEL_JOB_NAME: job, "multinode.dev/node-index": str(index),
                                    "multinode.dev/attempt": "0"}},
            "spec": {"nodeName": "kwok-1"}, "status": {"phase": "Running"}}


def namespace(name: str) -> dict:
    return {"metadata": {"name": name, "uid": f"ns/{name}", "resourceVersion": "7"}}


class PathKube:
    """LIST answers from `pods` (by namespace) and `namespaces`; namespaces in `refused` answer 403. The
    namespace watch plays `namespace_events`; every other watch waits until the test ends."""

    def __init__(self, pods: dict[str, list[dict]], namespaces: list[str], refused: set[str] = frozenset(),
                 namespace_events: list[dict] | None = None):
        self.pods, self.namespaces, self.refused = pods, namespaces, set(refused)
        self.namespace_events = list(namespace_events or ())
        self.list_calls: list[str] = []
        self.done = threading.Event()

    def list_sync(self, path: str) -> dict:
        self.list_calls.append(path)
        if path.startswith("/api/v1/namespaces?"):
            return {"metadata": {"resourceVersion": "9"}, "items": [namespace(n) for n in self.namespaces]}
        where = path.split("/namespaces/")[1].split("/")[0] if "/namespaces/" in path else None
        if where in self.refused:
            raise ApiError("list", 403, "Forbidden", f'pods is forbidden in the namespace "{where}"')
        node_pods = "/pods?" in path and "mirror" not in path.split("labelSelector=")[1]  # jobs: none here
        items = [p for ns, pods in self.pods.items() if where in (None, ns) for p in pods] if node_pods else []
        return {"metadata": {"resourceVersion": "9"}, "items": items}

    def watch_lines(self, path: str, read_timeout: float) -> Iterator[bytes]:
        if path.startswith("/api/v1/namespaces?"):
            events, self.namespace_events = self.namespace_events, []
            for event in events:
                yield json.dumps(event).encode()
        self.done.wait()


class Queued:
    """The Enqueue interface (controller/enqueue.py), recording the jobs it is asked to reconcile."""

    def __init__(self, own_writes: tuple[tuple[str, str], ...] = ()) -> None:
        self.queued: list[JobKey] = []
        self.delays: list[float] = []
        self.forgotten: list[JobKey] = []
        self.own_writes = set(own_writes)  # (uid, resourceVersion) of the operator's own status patches

    def enqueue(self, key: JobKey, delay: float = 0.0) -> None:
        self.queued.append(key)
        self.delays.append(delay)

    def own_status_write(self, uid: str, resource_version: str) -> bool:
        return (uid, resource_version) in self.own_writes

    def forget(self, key: JobKey, uid: str | None) -> None:
        self.forgotten.append(key)

    def pod_seen(self, key: JobKey, name: str) -> None:
        pass

    def pod_gone(self, key: JobKey, name: str, disruption: str) -> None:
        pass


def stores_with_jobs(*jobs: JobKey) -> Stores:
    stores = Stores()
    for namespace, name in jobs:
        stores.jobs.file({"metadata": {"namespace": namespace, "name": name, "uid": f"{namespace}/{name}"}})
    return stores


def pod_watches(kube: PathKube, namespaces: tuple[str, ...], stores: Stores, r: Queued) -> NamespacedWatches:
    """The operator's namespaced watches (no PodGroups, no Kueue), filing pods into `stores.pods`."""
    kinds = namespaced_kinds(r, stores)
    return NamespacedWatches(kube, namespaces, kinds, on_listed=lambda ns: requeue_all(r, stores.jobs, ns))  # type: ignore[arg-type]  # a fake KubeApi


def pod_names(stores: Stores, namespace: str, job: str) -> list[str]:
    return [p.name for p in stores.pods.of_job(namespace, job, None)]  # the fixtures' pods have no owner


def test_namespace_globs_follow_kopfs_rules() -> None:
    keep = namespace_matcher(("t-*", "!t-skip*"))
    assert keep("t-1") and not keep("t-skip-1") and not keep("other")
    assert namespace_matcher(())("any")


def test_named_namespaces_are_watched_each_and_each_is_ready_once_its_own_pods_are_listed() -> None:
    async def main() -> None:
        kube = PathKube({"a": [node_pod("a", "llm", 0)]}, [], refused={"b"})
        stores, r = Stores(), Queued()
        watches = pod_watches(kube, ("a", "b"), stores, r)
        watches.start()
        await until(lambda: watches.ready("a"), "namespace a listed")
        assert pod_names(stores, "a", "llm") == ["llm-0-a0"]
        assert ("a", "llm") in r.queued
        assert not watches.ready("b") and not watches.ready("c")  # refused; not followed
        assert all("/namespaces/a/" in p or "/namespaces/b/" in p for p in kube.list_calls)
        assert {p.split("?")[0] for p in kube.list_calls} == {
            f"{api}/namespaces/{ns}/{kind}" for ns in "ab" for api, kind in (
                ("/api/v1", "pods"), ("/api/v1", "services"), ("/apis/multinode.dev/v1alpha1", "trainingjobs"))}
        watches.stop()
        kube.done.set()
    asyncio.run(main())


def test_no_namespace_named_is_one_cluster_wide_watch_that_makes_every_namespace_ready() -> None:
    async def main() -> None:
        kube = PathKube({"x": [node_pod("x", "j", 0)], "y": [node_pod("y", "k", 1)]}, [])
        stores = Stores()
        watches = pod_watches(kube, (), stores, Queued())
        watches.start()
        await watches.wait_started()
        assert watches.ready("x") and watches.ready("anything")
        assert pod_names(stores, "x", "j") == ["j-0-a0"] and pod_names(stores, "y", "k") == ["k-1-a0"]
        assert {p.split("?")[0] for p in kube.list_calls} == {"/api/v1/pods", "/api/v1/services",
                                                             "/apis/multinode.dev/v1alpha1/trainingjobs"}
        watches.stop()
        kube.done.set()
    asyncio.run(main())


def test_under_a_glob_each_matching_namespace_is_followed_while_it_exists_a_refused_one_holding_none_back() -> None:
    async def main() -> None:
        kube = PathKube({"t-a": [node_pod("t-a", "llm", 0)], "t-new": [node_pod("t-new", "late", 0)],
                         "other": [node_pod("other", "theirs", 0)]},
                        ["t-a", "t-denied", "other"], refused={"t-denied"},
                        namespace_events=[{"type": "ADDED", "object": namespace("t-new")},
                                          {"type": "DELETED", "object": namespace("t-a")}])
        stores, r = stores_with_jobs(("t-new", "podless"), ("t-denied", "waiting")), Queued()
        watches = pod_watches(kube, ("t-*",), stores, r)
        watches.start()
        await watches.wait_started()  # the namespaces listed, not every namespace's pods
        await until(lambda: watches.ready("t-new"), "the namespace added later followed")
        await until(lambda: "t-a" not in watches.by_namespace, "the deleted namespace forgotten")
        assert pod_names(stores, "t-a", "llm") == []  # its pods left the store with it
        assert pod_names(stores, "t-new", "late") == ["late-0-a0"]
        await until(lambda: ("t-new", "podless") in r.queued, "a job without pods requeued once its namespace listed")
        assert not watches.ready("t-denied") and "t-denied" in watches.by_namespace  # retrying on its own
        assert ("t-denied", "waiting") not in r.queued
        assert not watches.ready("other") and not any("/namespaces/other/" in p for p in kube.list_calls)
        # never cluster-wide
        assert not any(p.startswith(("/api/v1/pods", "/api/v1/services", "/apis/multinode.dev/v1alpha1/trainingjobs"))
                       for p in kube.list_calls)
        watches.stop()
        kube.done.set()
    asyncio.run(main())


def test_a_node_pod_is_filed_under_its_job_and_its_node() -> None:
    pod = {"metadata": {"name": "llm-1-a0", "namespace": "ns", "uid": "u",
                        "labels": {"multinode.dev/job-name": "llm", "multinode.dev/node-index": "1",
                                   "multinode.dev/attempt": "0"}},
           "spec": {"nodeName": "kwok-3"}, "status": {"phase": "Running"}}
    keys = PodStore.node_pod_keys(pod)
    assert keys[("ns", "llm")].name == "llm-1-a0" and keys[OnNode("kwok-3")] == ("ns", "llm")
    stores = Stores()
    stores.pods.node_pods.put("u", keys)
    assert stores.pods.on_node("kwok-3") == {("ns", "llm")} and stores.pods.on_node("kwok-4") == set()


def test_a_mirror_pod_is_filed_under_its_job_and_its_node() -> None:
    """A node that stops answering must reconcile the job whose mirror runs there (it is then replaced)."""
    pod = {"metadata": {"name": "llm-mirror", "namespace": "ns", "uid": "m",
                        "labels": {"multinode.dev/mirror-of": "llm"}},
           "spec": {"nodeName": "kwok-5"}, "status": {"phase": "Running"}}
    keys = PodStore.mirror_keys(pod)
    assert keys[("ns", "llm")].node == "kwok-5" and keys[OnNode("kwok-5")] == ("ns", "llm")
    stores = Stores()
    stores.pods.mirrors.put("m", keys)
    assert stores.pods.mirror_of("ns", "llm", None) == keys[("ns", "llm")]
    assert stores.pods.of_job("ns", "llm", None) == []
    assert stores.pods.on_node("kwok-5") == {("ns", "llm")}


def test_a_job_resuming_from_another_reconciles_that_one_too() -> None:
    """The source job's status.resumedBy (which its mirror pins) follows the resuming job's status."""
    r = Queued()
    finetune = {"metadata": {"name": "finetune", "namespace": "ns", "uid": "f"},
                "spec": {"checkpointing": {"resumeFrom": {"trainingJob": "pretrain"}}}}
    entries = Stores().jobs.keys_of(finetune)  # filed by its own key and by the job it resumes from
    job_event(r)("MODIFIED", finetune, entries)
    assert r.queued == [("ns", "finetune"), ("ns", "pretrain")]
    job_event(r)("DELETED", finetune, entries)
    assert r.forgotten == [("ns", "finetune")]


def test_the_echo_of_the_operators_own_status_patch_reconciles_nothing_but_the_job_it_resumes_from() -> None:
    """Only status changed, to what the reconcile wrote; the source job's resumedBy follows that status."""
    r = Queued(own_writes=(("f", "12"),))
    finetune = {"metadata": {"name": "finetune", "namespace": "ns", "uid": "f", "resourceVersion": "12"},
                "spec": {"checkpointing": {"resumeFrom": {"trainingJob": "pretrain"}}}}
    entries = Stores().jobs.keys_of(finetune)
    job_event(r)("MODIFIED", finetune, entries)
    assert r.queued == [("ns", "pretrain")]
    # Any other version of it (a spec change, the mirror's status.checkpoints) is news.
    job_event(r)("MODIFIED", {**finetune, "metadata": {**finetune["metadata"], "resourceVersion": "13"}}, entries)
    assert r.queued == [("ns", "pretrain"), ("ns", "finetune"), ("ns", "pretrain")]


def pending_pod_of_llm() -> dict:
    return {"metadata": {"name": "llm-0-a0", "namespace": "ns", "uid": "p", "labels": {LABEL_JOB_NAME: "llm"}},
            "spec": {}, "status": {"phase": "Pending"}}


def test_a_pods_event_marks_its_job_dirty_after_the_batch_window() -> None:
    """The events of a job's pods within POD_EVENT_BATCH_SECONDS fold into one reconcile (queue.py)."""
    r = Queued()
    pod = pending_pod_of_llm()
    pod_event(r, Stores().jobs)("MODIFIED", pod, PodStore.node_pod_keys(pod))
    assert r.queued == [("ns", "llm")] and r.delays == [POD_EVENT_BATCH_SECONDS] and POD_EVENT_BATCH_SECONDS > 0


@pytest.mark.parametrize(("num_nodes", "batch"), [(8, POD_EVENT_BATCH_SECONDS), (500, POD_EVENT_BATCH_SECONDS),
                                                  (750, 0.75), (1000, MAX_POD_EVENT_BATCH_SECONDS),
                                                  (10_000, MAX_POD_EVENT_BATCH_SECONDS)])
def test_a_big_jobs_pods_are_batched_longer_up_to_the_job_controllers_second(num_nodes: int, batch: float) -> None:
    """Each reconcile of a big job is O(pods) and writes its status: its pods' events fold over a longer window,
    never past a second (Kubernetes' Job controller batches every job's pods for one)."""
    r, stores = Queued(), Stores()
    stores.jobs.file({"metadata": {"name": "llm", "namespace": "ns", "uid": "j"}, "spec": {"numNodes": num_nodes}})
    pod = pending_pod_of_llm()
    pod_event(r, stores.jobs)("MODIFIED", pod, PodStore.node_pod_keys(pod))
    assert r.queued == [("ns", "llm")] and r.delays == [pytest.approx(batch)]


class Recorder:
    def __init__(self) -> None:
        self.keys: list[JobKey] = []

    def enqueue(self, key: JobKey, delay: float = 0.0) -> None:
        self.keys.append(key)


def test_a_node_cordoned_or_uncordoned_reconciles_its_jobs_and_a_heartbeat_does_not() -> None:
    stores = Stores()
    stores.pods.node_pods.put("ml/a", PodStore.node_pod_keys(node_pod("ml", "llama", 0)))
    recorder = Recorder()
    informer = node_informer(None, stores.nodes, stores.pods, recorder, stores.jobs)  # type: ignore[arg-type]

    def event(kind: str, unschedulable: bool, heartbeat: str) -> None:
        node = {"metadata": {"name": "kwok-1", "uid": "n1", "resourceVersion": heartbeat},
                "spec": {"unschedulable": unschedulable},
                "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}}
        informer.on_event(kind, node, stores.nodes.keys_of(node))

    event("LISTED", False, "1")
    event("MODIFIED", False, "2")
    assert recorder.keys == [], "a heartbeat changes nothing the jobs read"
    event("MODIFIED", True, "3")
    assert recorder.keys == [("ml", "llama")], "cordoned: its job asks for a checkpoint"
    event("MODIFIED", False, "4")
    assert recorder.keys == [("ml", "llama")] * 2
