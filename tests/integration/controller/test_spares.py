"""Hot spares (spec.spareNodes) on kwok nodes: made once the gang runs, each on a machine of its own, waiting
in its preflight (tools/localcluster/localcluster/stages/spare-wait.yaml); a lost node's rank, rank 0's here,
goes to the spare while the other pod stays, the leader moving with it; the pool is refilled. (On real nodes,
with a real preflight, image volume and trainer: tests/integration/realnodes/test_node_loss.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from localcluster import LocalCluster

from multinode.api import GROUP, PLURAL, VERSION
from multinode.api.constants import ANNOTATION_LEADER, ANNOTATION_NODE_INDEX, LABEL_SPARE
from multinode.testing import training_job
from tests.support import jobs
from tests.support.nodepools import on_pool, own_pool
from localcluster.harness.waiting import wait_for

JOB = "spared"


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def spare_pool(local_cluster: LocalCluster, core: client.CoreV1Api) -> Iterator[str]:
    # Two for the gang, one for the spare, one for the spare that refills the pool.
    with own_pool(local_cluster, core, "spares", count=4) as pool:
        yield pool.prefix


def _spares(core: client.CoreV1Api, ns: str) -> dict[str, client.V1Pod]:
    return {p.metadata.name: p for p in jobs.job_pods(core, ns, JOB)
            if LABEL_SPARE in (p.metadata.labels or {}) and not p.metadata.deletion_timestamp}


def _warm(core: client.CoreV1Api, ns: str, name: str) -> client.V1Pod | None:
    pod = _spares(core, ns).get(name)
    running = [s for s in (pod.status.init_container_statuses or []) if s.state.running] if pod else []
    return pod if pod is not None and pod.spec.node_name and running else None


def restarted_in_place(core: client.CoreV1Api, ns: str, name: str) -> None:
    """What a kubelet reports of a pod whose trainer restarted in place once (kwok, which runs no containers,
    never restarts one): its restart count up by one, running again."""
    pod = core.read_namespaced_pod(name, ns)
    statuses = [{**core.api_client.sanitize_for_serialization(cs), "restartCount": cs.restart_count + 1}
                for cs in pod.status.container_statuses]
    core.patch_namespaced_pod_status(name, ns, {"status": {"containerStatuses": statuses}})


def test_a_warm_spare_takes_lost_rank_0_and_the_pool_is_refilled(
        core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str,
        spare_pool: str) -> None:
    ns = job_namespace
    jobs.apply(kubeconfig, ns, training_job(JOB, 2, spareNodes=1, failurePolicy={"restartStrategy": "InPlace"},
                                            podTemplate=on_pool(spare_pool)))
    jobs.wait_phase(custom, ns, JOB, "Running")
    spare = wait_for(lambda: _warm(core, ns, f"{JOB}-s0"), timeout=60, what="the spare waiting in its preflight")
    gang = {p.metadata.name: p for p in jobs.job_pods(core, ns, JOB) if p.metadata.name.endswith("-a0")}
    assert spare.spec.node_name not in {p.spec.node_name for p in gang.values()}, "a machine of its own"
    assert spare.status.phase == "Pending", "it waits in its preflight"
    wait_for(lambda: ((jobs.get_job(custom, ns, JOB)["status"].get("spares") or {}).get("warm") == 1) or None,
             timeout=30, what="status.spares counting the warm spare")

    lost_node = gang[f"{JOB}-0-a0"].spec.node_name
    core.patch_node(lost_node, {"metadata": {"labels": {"node-not-ready.stage.kwok.x-k8s.io": "true"}}})

    def took() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(f"{JOB}-s0", ns)
        taken = (pod.metadata.annotations or {}).get(ANNOTATION_NODE_INDEX) == "0"
        return pod if taken and pod.status.phase == "Running" else None
    joined = wait_for(took, timeout=120, what="the spare running rank 0")
    # kwok runs no containers: the pod that stays restarts in place, once told attempt 1, as a kubelet would
    # report it.
    wait_for(lambda: core.read_namespaced_pod(f"{JOB}-1-a0", ns).metadata.annotations.get(
        "multinode.dev/attempt") == "1" or None, timeout=30, what="the pod that stays told attempt 1")
    restarted_in_place(core, ns, f"{JOB}-1-a0")
    status = wait_for(lambda: (s := jobs.get_job(custom, ns, JOB)["status"])["phase"] == "Running"
                      and s["attempt"] == 1 and s, timeout=60, what="attempt 1 running")
    record = status["restartHistory"][-1]
    assert (record["reason"], record["index"], record["spare"], record["counted"]) == ("NodeLost", 0, 0, False)
    assert joined.spec.node_name == spare.spec.node_name and joined.metadata.uid == spare.metadata.uid
    stays = core.read_namespaced_pod(f"{JOB}-1-a0", ns)
    assert stays.metadata.uid == gang[f"{JOB}-1-a0"].metadata.uid, "the other pod stays"
    leader = f"{JOB}-s0.{JOB}.{ns}.svc"
    assert stays.metadata.annotations[ANNOTATION_LEADER] == leader == joined.metadata.annotations[ANNOTATION_LEADER]
    assert f"{JOB}-0-a1" not in {p.metadata.name for p in jobs.job_pods(core, ns, JOB)}, "no new pod for rank 0"
    rows = {row["index"]: row["pod"] for row in status["nodeStatuses"]}
    assert rows == {0: f"{JOB}-s0", 1: f"{JOB}-1-a0"}

    refill = wait_for(lambda: _warm(core, ns, f"{JOB}-s1"), timeout=60, what="a new spare refilling the pool")
    assert refill.spec.node_name not in {lost_node, joined.spec.node_name, stays.spec.node_name}
    # Events are posted after the status, without holding the worker: a moment later.
    wait_for(lambda: "SpareTookRank" in {e.reason for e in core.list_namespaced_event(
        ns, field_selector=f"involvedObject.name={JOB}").items} or None, timeout=30, what="the SpareTookRank Event")
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, JOB)
