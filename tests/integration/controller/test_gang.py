"""Gang scheduling by default, with the real kube-scheduler on kwok nodes.

Each test makes a node pool of its own (8 GPUs a node, jobs asking 8: one pod per node) and selects it, so
the session's nodes and other tests' pods do not count. Where the apiserver serves native PodGroups (the
session cluster), the scheduler binds a job's pods all together or not at all; on a cluster without them
(a cluster of its own, gates off), the operator releases a partial gang after the timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from localcluster import ClusterConfig, LocalCluster, NodePoolConfig
from localcluster.harness.kube import kubectl, new_namespace
from localcluster.harness.operator import CRD_FILE, OperatorProcess
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from localcluster.nodes import POOL_LABEL
from multinode.api import CRD_NAME, LABEL_JOB_NAME
from tests.support import jobs
from tests.support.jobs import FINISH_AFTER
from tests.support.nodepools import on_pool, pool_taint

POD_GROUPS = ("scheduling.k8s.io", "v1alpha2", "podgroups")


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def make_pool(cluster: LocalCluster, count: int, **config: Any) -> NodePoolConfig:
    """`count` fake GPU nodes of a pool of their own, Ready."""
    prefix = f"gang-{uuid.uuid4().hex[:6]}"
    pool = NodePoolConfig(count=count, name_prefix=prefix, taints=(pool_taint(prefix),), **config)
    grow_pool(cluster, pool, 0, count)
    return pool


def grow_pool(cluster: LocalCluster, pool: NodePoolConfig, start: int, count: int) -> None:
    core = client.CoreV1Api(cluster.api_client())
    names = cluster.create_nodes(replace(pool, count=count), start_index=start)
    wait_for(lambda: all(_ready(core, n) for n in names), timeout=60, what=f"nodes {names} Ready")


def drop_pool(cluster: LocalCluster, pool: NodePoolConfig) -> None:
    core = client.CoreV1Api(cluster.api_client())
    for node in core.list_node(label_selector=f"{POOL_LABEL}={pool.name_prefix}").items:
        core.delete_node(node.metadata.name)


def _ready(core: client.CoreV1Api, name: str) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in core.read_node(name).status.conditions or [])


def pool_job(name: str, num_nodes: int, pool: NodePoolConfig, **spec) -> dict:
    manifest = training_job(name, num_nodes, gpus=8, **spec)
    template = manifest["spec"].setdefault("podTemplate", {})
    template.update(on_pool(pool.name_prefix, template.get("tolerations")))
    return manifest


@dataclass
class Binding:
    """What a watch of the namespace's pods saw: every moment a node pod was bound, finished or deleted."""

    events: list[tuple[float, str, str, str]] = field(default_factory=list)  # (time, job, pod, what)


class BindingRecorder:
    """Watches a namespace's node pods and records, in order, when each got a node and when it stopped
    holding one (finished or deleted): the job's bound pods at every moment can be replayed from it."""

    def __init__(self, core: client.CoreV1Api, namespace: str):
        self.seen = Binding()
        self._core, self._namespace = core, namespace
        self._watch = watch.Watch()
        self._bound: set[str] = set()
        self._released: set[str] = set()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> BindingRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._watch.stop()

    def _run(self) -> None:
        stream = self._watch.stream(self._core.list_namespaced_pod, self._namespace, label_selector=LABEL_JOB_NAME,
                                    timeout_seconds=600)
        try:
            for event in stream:
                pod = event["object"]
                name, job = pod.metadata.name, pod.metadata.labels[LABEL_JOB_NAME]
                holds = event["type"] != "DELETED" and pod.status.phase not in ("Succeeded", "Failed")
                if pod.spec.node_name and name not in self._bound:
                    self._bound.add(name)
                    self.seen.events.append((time.monotonic(), job, name, "bound"))
                if pod.spec.node_name and not holds and name not in self._released:
                    self._released.add(name)
                    self.seen.events.append((time.monotonic(), job, name, "released"))
        except ProtocolError:
            pass  # __exit__ closed the stream

    def holding(self) -> list[dict[str, int]]:
        """After each recorded event: how many bound pods each job held."""
        held: dict[str, int] = {}
        timeline = []
        for _, job, _, what in self.seen.events:
            held[job] = held.get(job, 0) + (1 if what == "bound" else -1)
            timeline.append(dict(held))
        return timeline

    def times(self, job: str, what: str) -> list[float]:
        return [t for t, j, _, w in self.seen.events if j == job and w == what]


def raw_pods(kubeconfig: str, namespace: str, job: str) -> list[dict]:
    out = kubectl(kubeconfig, "get", "pods", "-n", namespace, "-l", f"{LABEL_JOB_NAME}={job}", "-o", "json").stdout
    return json.loads(out)["items"]


def gang_condition(custom: client.CustomObjectsApi, namespace: str, name: str, reason: str) -> dict | None:
    job = jobs.get_job(custom, namespace, name)
    found = jobs.condition(job, "GangScheduled")
    return job if found is not None and found["reason"] == reason else None


def test_two_jobs_that_do_not_both_fit_run_one_after_the_other_never_half_placed(
    local_cluster: LocalCluster, core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str,
    job_namespace: str,
) -> None:
    ns = job_namespace
    pool = make_pool(local_cluster, 8)
    try:
        with BindingRecorder(core, ns) as recorder:
            # Long enough for the waiting job's status to be read while the other runs.
            for name in ("first", "second"):
                jobs.apply(kubeconfig, ns, pool_job(name, 6, pool, podTemplate={
                    "annotations": {FINISH_AFTER: "15s"}}))
            running = wait_for(lambda: next((n for n in ("first", "second") if (jobs.get_job(custom, ns, n).get(
                "status") or {}).get("phase") == "Running"), None), timeout=60, what="one job Running")
            waiting = "second" if running == "first" else "first"

            # The other waits with nothing bound, and says why: the scheduler's own PodGroupScheduled words.
            job = wait_for(lambda: gang_condition(custom, ns, waiting, "GangUnschedulable"), timeout=30,
                           what=f"{waiting} GangUnschedulable")
            assert job["status"]["phase"] == "Pending"
            assert jobs.condition(job, "Running")["reason"] == "GangUnschedulable"
            assert f"PodGroup {waiting}-a0" in jobs.condition(job, "Running")["message"]
            assert job["status"]["scheduling"] == {"gang": "PodGroup", "podGroup": f"{waiting}-a0", "releases": 0}
            assert not [p for p in jobs.job_pods(core, ns, waiting) if p.spec.node_name]

            for name in ("first", "second"):
                jobs.wait_phase(custom, ns, name, "Succeeded", timeout=120)
        timeline = recorder.holding()
    finally:
        drop_pool(local_cluster, pool)

    # Over the whole run: the waiting job held no pod until the running one released its nodes, and each
    # job's six pods were bound within moments of each other, never some of them for long.
    first_release = min(recorder.times(running, "released"))
    assert not [t for t in recorder.times(waiting, "bound") if t < first_release]
    for name in (running, waiting):
        binds = recorder.times(name, "bound")
        assert len(binds) == 6 and max(binds) - min(binds) < 5, (name, binds)
    # Replayed event by event: until the running job's first pod finished, the other held nothing.
    until = next(i for i, (t, *_rest) in enumerate(recorder.seen.events) if t >= first_release)
    assert all(held.get(waiting, 0) == 0 for held in timeline[:until])
    assert max(held.get(running, 0) for held in timeline[:until]) == 6

    # One PodGroup per attempt, owned by its job, gang minCount numNodes; every pod joined it.
    for name in ("first", "second"):
        group = custom.get_namespaced_custom_object(*POD_GROUPS[:2], ns, POD_GROUPS[2], f"{name}-a0")
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 6}}
        assert group["spec"]["disruptionMode"] == "PodGroup"
        [owner] = group["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("TrainingJob", name, True)
        assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in raw_pods(kubeconfig, ns, name)} == {f"{name}-a0"}
        done = jobs.get_job(custom, ns, name)
        assert jobs.condition(done, "GangScheduled")["status"] == "True"


def _not_enough_nodes(job: dict | None) -> dict | None:
    running = jobs.condition(job, "Running") if job is not None else None
    return job if running is not None and running["reason"] == "NotEnoughNodes" else None


def test_a_job_bigger_than_the_cluster_holds_no_gpu_and_runs_when_nodes_are_added(
    local_cluster: LocalCluster, core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str,
    job_namespace: str,
) -> None:
    ns = job_namespace
    pool = make_pool(local_cluster, 3)
    try:
        jobs.apply(kubeconfig, ns, pool_job("big", 4, pool))
        job = wait_for(lambda: _not_enough_nodes(gang_condition(custom, ns, "big", "GangUnschedulable")),
                       timeout=60, what="big GangUnschedulable and NotEnoughNodes")
        running = jobs.condition(job, "Running")
        # The gang's own condition says it is unschedulable; the phase's reason says why in the user's terms:
        # one pod per node, and the cluster has fewer matching nodes than the job asks for.
        assert (job["status"]["phase"], running["reason"]) == ("Pending", "NotEnoughNodes")
        assert running["message"].startswith("4 nodes needed (one pod per node), 3 Ready node(s) match"), running
        pods = jobs.job_pods(core, ns, "big")
        assert len(pods) == 4 and not [p for p in pods if p.spec.node_name]

        grow_pool(local_cluster, pool, 3, 1)
        jobs.wait_phase(custom, ns, "big", "Running", timeout=90)
        pods = jobs.job_pods(core, ns, "big")
        assert sorted(p.spec.node_name for p in pods) == [f"{pool.name_prefix}-{i}" for i in range(4)]
        assert jobs.condition(jobs.get_job(custom, ns, "big"), "GangScheduled")["reason"] == "GangPlaced"
    finally:
        drop_pool(local_cluster, pool)


def test_topology_is_the_group_s_constraint_so_the_gang_goes_where_it_all_fits(
    local_cluster: LocalCluster, core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str,
    job_namespace: str,
) -> None:
    ns = job_namespace
    # Two blocks of 4 nodes under a label only this pool has; one node of block-0 is taken.
    label = "gang.localcluster.multinode.dev/block"
    pool = make_pool(local_cluster, 8, nodes_per_block=4, block_label=label)
    try:
        blocker = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "blocker"}, "spec": {
            "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": f"{pool.name_prefix}-0"},
            "tolerations": on_pool(pool.name_prefix)["tolerations"],
            "containers": [{"name": "c", "image": "example.invalid/x",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
        core.create_namespaced_pod(ns, blocker)
        wait_for(lambda: core.read_namespaced_pod("blocker", ns).spec.node_name, timeout=30, what="blocker bound")

        # Counting node capacity alone, both blocks look alike and block-0 would win the tie; the scheduler
        # sees that only block-1 has room for all four.
        jobs.apply(kubeconfig, ns, pool_job("topo", 4, pool, topology={"sameDomainLabel": label}))
        job = jobs.wait_phase(custom, ns, "topo", "Running", timeout=60)
        assert job["status"]["topologyDomain"] == "block-1"
        assert sorted(p.spec.node_name for p in jobs.job_pods(core, ns, "topo")) == \
            [f"{pool.name_prefix}-{i}" for i in range(4, 8)]
        group = custom.get_namespaced_custom_object(*POD_GROUPS[:2], ns, POD_GROUPS[2], "topo-a0")
        assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": label}]}
        assert not any(label in (p.spec.node_selector or {}) for p in jobs.job_pods(core, ns, "topo"))
    finally:
        drop_pool(local_cluster, pool)


@pytest.fixture
def priority_classes(api: client.ApiClient) -> Iterator[tuple[str, str]]:
    """A low and a high PriorityClass of this test's own (cluster-scoped, so deleted after it)."""
    scheduling = client.SchedulingV1Api(api)
    suffix = uuid.uuid4().hex[:6]
    names = (f"gang-low-{suffix}", f"gang-high-{suffix}")
    for name, value in zip(names, (100, 100000), strict=True):
        scheduling.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                          "metadata": {"name": name}, "value": value})
    try:
        yield names
    finally:
        for name in names:
            scheduling.delete_priority_class(name)


def test_a_high_priority_job_on_a_full_cluster_preempts_one_lower_priority_gang_whole(
    local_cluster: LocalCluster, core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str,
    job_namespace: str, priority_classes: tuple[str, str],
) -> None:
    ns = job_namespace
    low_class, high_class = priority_classes
    pool = make_pool(local_cluster, 4)
    try:
        with BindingRecorder(core, ns) as recorder:
            jobs.apply(kubeconfig, ns, pool_job("low", 4, pool, podTemplate={
                "priorityClassName": low_class}))
            jobs.wait_phase(custom, ns, "low", "Running", timeout=60)
            jobs.apply(kubeconfig, ns, pool_job("high", 4, pool, podTemplate={
                "priorityClassName": high_class}))
            high = jobs.wait_phase(custom, ns, "high", "Running", timeout=120)

            def preempted() -> dict | None:
                status = jobs.get_job(custom, ns, "low").get("status") or {}
                history = status.get("restartHistory") or []
                return status if history and history[-1]["reason"] == "Preempted" else None

            low = wait_for(preempted, timeout=60, what="low's restart recorded as Preempted")
            # Its next attempt waits as a gang: nothing of it bound while the high job holds the nodes.
            wait_for(lambda: gang_condition(custom, ns, "low", "GangUnschedulable"), timeout=60,
                     what="low's next attempt GangUnschedulable")
            assert not [p for p in jobs.job_pods(core, ns, "low") if p.spec.node_name and
                        p.metadata.deletion_timestamp is None]
        timeline = recorder.holding()
    finally:
        drop_pool(local_cluster, pool)

    assert (low["restarts"], low["uncountedRestarts"]) == (0, 1)
    assert "preempted by the scheduler" in low["restartHistory"][-1]["message"]
    assert high["status"]["restarts"] == 0 and high["status"].get("uncountedRestarts", 0) == 0
    # The whole low gang went, not part of it: the high job bound all 4 and never shared the pool with
    # a part of the low one (4 nodes of 8 GPUs: at no moment more than 4 pods held between them).
    assert max(held.get("high", 0) for held in timeline) == 4
    assert all(held.get("high", 0) + held.get("low", 0) <= 4 for held in timeline)
    group = custom.get_namespaced_custom_object(*POD_GROUPS[:2], ns, POD_GROUPS[2], "high-a0")
    assert group["spec"]["priorityClassName"] == high_class


# ---- a cluster that does not serve PodGroups -----------------------------------------------------------

NO_GANG_PREFIX = "nogang"


@pytest.fixture(scope="module")
def no_gang_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of its own with the gang feature gates and API version off, and an operator on it."""
    cluster = LocalCluster(ClusterConfig(name=f"nogang-{os.getpid()}", nodes=NodePoolConfig(count=0),
                                         gang_scheduling=False, die_with_parent=True))
    cluster.start()
    op = None
    try:
        kubectl(str(cluster.kubeconfig), "apply", "--server-side", "-f", str(CRD_FILE))
        extensions = client.ApiextensionsV1Api(cluster.api_client())
        wait_for(lambda: any(c.type == "Established" and c.status == "True" for c in
                             extensions.read_custom_resource_definition(CRD_NAME).status.conditions or []),
                 timeout=60, what="CRD Established")
        op = OperatorProcess(str(cluster.kubeconfig), [f"{NO_GANG_PREFIX}-*"],
                             Path(tmp_path_factory.mktemp("nogang-operator")) / "operator.log")
        op.start()
        yield cluster
    finally:
        if op is not None:
            op.stop()
        cluster.stop()
        shutil.rmtree(cluster.dir, ignore_errors=True)


def test_without_the_gang_api_a_partial_gang_is_released_and_the_job_runs_once_it_fits(
    no_gang_cluster: LocalCluster,
) -> None:
    cluster = no_gang_cluster
    api = cluster.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    config = str(cluster.kubeconfig)
    ns = new_namespace(core, prefix=NO_GANG_PREFIX)
    pool = make_pool(cluster, 3)
    jobs.apply(config, ns, pool_job("half", 4, pool, scheduling={"partialGangTimeoutSeconds": 3},
                                    failurePolicy={"backoff": {"initialSeconds": 1}}))

    # 3 of 4 pods bound, the 4th unschedulable: said at once, released after 3 s.
    job = wait_for(lambda: gang_condition(custom, ns, "half", "WaitingForCapacity"), timeout=60,
                   what="WaitingForCapacity")
    assert "waiting for capacity for 4 nodes" in jobs.condition(job, "Running")["message"]
    assert job["status"]["scheduling"]["gang"] == "None"
    assert not any("schedulingGroup" in p["spec"] for p in raw_pods(config, ns, "half"))

    def released_once() -> dict | None:
        status = jobs.get_job(custom, ns, "half").get("status") or {}
        return status if (status.get("scheduling") or {}).get("releases", 0) >= 1 else None

    released = wait_for(released_once, timeout=60, what="a partial gang released")
    assert released["phase"] == "Pending"
    assert released["restarts"] == 0 and released.get("uncountedRestarts", 0) == 0
    wait_for(lambda: not [p for p in jobs.job_pods(core, ns, "half") if p.metadata.name.endswith("-a0")],
             timeout=60, what="attempt 0's pods deleted")
    # Posted after the status that says so, without holding the operator's worker: waited for.
    events = wait_for(lambda: core.list_namespaced_event(ns, field_selector="reason=PartialGangReleased").items,
                      timeout=30, what="the PartialGangReleased Event")
    assert "released them all" in events[0].message

    grow_pool(cluster, pool, 3, 1)
    done = jobs.wait_phase(custom, ns, "half", "Running", timeout=120)
    assert done["status"]["attempt"] >= 1 and done["status"]["restarts"] == 0
    assert jobs.condition(done, "GangScheduled")["reason"] == "GangPlaced"
    assert len({p.spec.node_name for p in jobs.job_pods(core, ns, "half") if p.status.phase == "Running"}) == 4
    core.delete_namespace(ns)
