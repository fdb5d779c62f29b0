"""Elastic jobs (spec.elastic) on kwok nodes, through the operator and a real apiserver and scheduler: the
rendezvous store is a pod of its own on a machine without training pods, or sharing one (with a Warning) when
the pool has no other; a node cordoned and its pod deleted
is shed while the others stay (not a restart); the shed index's new pod waits for capacity and is back once
it runs; the store deleted restarts the gang, uncounted. (With real torchrun on real nodes:
tests/integration/realnodes/test_elastic.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from localcluster import LocalCluster

from multinode.api import GROUP, PLURAL, VERSION
from multinode.api.constants import LABEL_RENDEZVOUS_STORE
from multinode.testing import training_job
from tests.support import jobs
from tests.support.nodepools import on_pool, own_pool
from localcluster.harness.waiting import wait_for

JOB = "elastic"


@pytest.fixture
def elastic_pool(local_cluster: LocalCluster, core: client.CoreV1Api) -> Iterator[str]:
    # Three for the gang, one for the store.
    with own_pool(local_cluster, core, "elastic", count=4) as pool:
        yield pool.prefix


def _live(core: client.CoreV1Api, ns: str) -> dict[str, client.V1Pod]:
    return {p.metadata.name: p for p in jobs.job_pods(core, ns, JOB) if not p.metadata.deletion_timestamp}


def _events(core: client.CoreV1Api, ns: str) -> set[str]:
    return {e.reason for e in core.list_namespaced_event(ns, field_selector=f"involvedObject.name={JOB}").items}


def test_a_node_lost_is_shed_grows_back_and_the_store_lost_restarts_the_gang(
        core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str,
        elastic_pool: str) -> None:
    ns = job_namespace
    jobs.apply(kubeconfig, ns, training_job(JOB, 3, elastic={"minNodes": 2, "resizeWindowSeconds": 3},
                                            podTemplate=on_pool(elastic_pool)))
    jobs.wait_phase(custom, ns, JOB, "Running")
    gang = {name: pod for name, pod in _live(core, ns).items() if name.endswith("-a0") and "rdzv" not in name}
    assert len(gang) == 3
    store = wait_for(lambda: (p := _live(core, ns).get(f"{JOB}-rdzv-a0")) and p.spec.node_name and p,
                     timeout=60, what="the rendezvous store scheduled")
    assert store.metadata.labels[LABEL_RENDEZVOUS_STORE] == "0"
    assert store.spec.node_name not in {p.spec.node_name for p in gang.values()}, "no training node's"
    kept = wait_for(lambda: (s := jobs.get_job(custom, ns, JOB)["status"]).get("elastic", {}).get("storeUid") and s,
                    timeout=30, what="the store's UID kept")
    assert kept["elastic"]["storeUid"] == store.metadata.uid and not kept["elastic"].get("storeShared")
    env = jobs.pod_env(core, gang[f"{JOB}-1-a0"])
    assert env["PET_NNODES"] == "2:3" and env["PET_RDZV_ENDPOINT"].startswith(f"{JOB}-rdzv.{JOB}.{ns}.svc:")

    # Node 1's machine cordoned and its pod deleted (a drain without a budget): shed, the others stay. (The
    # store's machine cordoned too, so that no machine is free for node 1's new pod until one is uncordoned.)
    lost = gang[f"{JOB}-1-a0"]
    for node in (lost.spec.node_name, store.spec.node_name):
        core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        core.delete_namespaced_pod(lost.metadata.name, ns)
        shrunk = wait_for(lambda: (s := jobs.get_job(custom, ns, JOB)["status"]).get("elastic", {}).get("shed")
                          and s, timeout=60, what="node 1 shed")
        assert shrunk["phase"] == "Running" and shrunk["attempt"] == 0 and shrunk["restarts"] == 0
        assert shrunk.get("uncountedRestarts", 0) == 0 and not shrunk.get("restartHistory"), "not a restart"
        assert [r["index"] for r in shrunk["elastic"]["shed"]] == [1]
        assert jobs.condition(jobs.get_job(custom, ns, JOB), "Running")["reason"] in ("RunningReduced",)
        for name in (f"{JOB}-0-a0", f"{JOB}-2-a0"):
            assert core.read_namespaced_pod(name, ns).metadata.uid == gang[name].metadata.uid, "the others stay"
        wait_for(lambda: "ElasticShrunk" in _events(core, ns) or None, timeout=30, what="the ElasticShrunk Event")
        # After the window its new pod is made; no machine is free for it: it waits, the job trains on.
        waiting = wait_for(lambda: (p := _live(core, ns).get(f"{JOB}-1-a0")) and p.metadata.uid != lost.metadata.uid
                           and p, timeout=60, what="node 1's new pod")
        assert waiting.spec.node_name is None
        # The gang's PodGroup is placed; the new pod waits outside it, where the scheduler retries it on events
        # (in the group, 1.36's retried it without pause while no machine was free: a core busy).
        assert all(p.spec.scheduling_group.pod_group_name == f"{JOB}-a0" for p in gang.values())
        assert waiting.spec.scheduling_group is None
        assert jobs.get_job(custom, ns, JOB)["status"]["currentNodes"] == 2
    finally:
        for node in (lost.spec.node_name, store.spec.node_name):
            core.patch_node(node, {"spec": {"unschedulable": False}})
    # Capacity back: it runs, and the job is whole again.
    grown = wait_for(lambda: (s := jobs.get_job(custom, ns, JOB)["status"]).get("elastic")
                     and not s["elastic"].get("shed") and s.get("currentNodes") == 3 and s,
                     timeout=90, what="node 1 back")
    assert grown["attempt"] == 0 and grown["elastic"]["resizes"] == 2 and grown["restarts"] == 0
    wait_for(lambda: "ElasticGrew" in _events(core, ns) or None, timeout=30, what="the ElasticGrew Event")

    # The store deleted: the rendezvous is gone; the gang restarts with a new one, not counted.
    core.delete_namespaced_pod(f"{JOB}-rdzv-a0", ns)
    restarted = wait_for(lambda: (s := jobs.get_job(custom, ns, JOB)["status"]).get("attempt") == 1 and s,
                         timeout=60, what="attempt 1 after the store's loss")
    record = restarted["restartHistory"][-1]
    assert (record["reason"], record["counted"]) == ("RendezvousLost", False)
    wait_for(lambda: f"{JOB}-rdzv-a1" in _live(core, ns) or None, timeout=60, what="attempt 1's store")
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, JOB)


def test_a_pool_no_larger_than_the_gang_shares_a_machine_with_the_store_and_says_so(
        local_cluster: LocalCluster, core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str,
        job_namespace: str) -> None:
    ns = job_namespace
    with own_pool(local_cluster, core, "elastic-full", count=3) as pool:
        jobs.apply(kubeconfig, ns, training_job(JOB, 3, elastic={"minNodes": 2}, podTemplate=on_pool(pool.prefix)))
        store = wait_for(lambda: (p := _live(core, ns).get(f"{JOB}-rdzv-a0")) and p.spec.node_name and p,
                         timeout=60, what="the rendezvous store placed, sharing a machine")
        gang = {p.spec.node_name for name, p in _live(core, ns).items() if "rdzv" not in name}
        assert len(gang) == 3 and store.spec.node_name in gang, "the gang first; then the only room there is"
        status = wait_for(lambda: (s := jobs.get_job(custom, ns, JOB)["status"]).get("elastic", {}).get("storeUid")
                          and s, timeout=30, what="the store's UID kept")
        assert status["elastic"]["storeShared"] is True and status["elastic"]["storeUid"] == store.metadata.uid
        assert jobs.wait_phase(custom, ns, JOB, "Running")["status"]["currentNodes"] == 3
        assert status["attempt"] == 0 and status["restarts"] == 0
        warning = wait_for(lambda: next((e for e in core.list_namespaced_event(
            ns, field_selector=f"involvedObject.name={JOB},reason=RendezvousStoreShared").items), None),
            timeout=30, what="the RendezvousStoreShared Event")
        assert warning.type == "Warning" and "restarts the gang" in warning.message
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, JOB)
        wait_for(lambda: not _live(core, ns) or None, timeout=60, what="the job's pods gone")
