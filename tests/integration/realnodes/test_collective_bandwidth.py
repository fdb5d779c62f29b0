"""The collective bandwidth test on real nodes (spec.healthCheck.collectiveBandwidth): the preflights of an
attempt run a ring all-reduce over TCP between pods on two real nodes, and status.nodeStatuses shows each
node's busbw. Then, in a ring of three pods (one per node), one pod's link is made slow for real (a tc
token-bucket filter on both ends of its veth): its preflight fails with CollectiveBandwidthLow naming both its
links, its neighbours pass, its node is excluded and the gang restarts on the other real nodes, uncounted,
and succeeds."""

from __future__ import annotations

import textwrap
from typing import Any

from kubernetes import client
from localcluster import LocalCluster

from localcluster.harness.waiting import wait_for
from multinode.api import GROUP, LABEL_ATTEMPT, LABEL_JOB_NAME, PLURAL, VERSION
from tests.support import jobs
from tests.support.linkshaping import find_pid, qdiscs, shaped_pod_link
from tests.support.realnodes import (ALL_BUT_ONE, clients, node_away_from_leader, real_job, real_node_name,
                                    real_node_names)

SCRIPT = textwrap.dedent("""
    import os
    print(f"trainer attempt={os.environ['MULTINODE_ATTEMPT']} host={os.environ['MULTINODE_HOST_NODE']}", flush=True)
""")
# A floor far below what two pods on this machine reach over TCP (Gbit/s even on two busy cores) and ten times
# the shaped link's 10 Mbit/s.
MIN_GBPS = 0.1
SLOW_RATE = "10mbit"


def _job(name: str, num_nodes: int, gpus: int, **spec: Any) -> dict[str, Any]:
    bandwidth = {"minGbps": MIN_GBPS, "sizeMiB": 4, "timeoutSeconds": 40}
    return real_job(name, num_nodes, SCRIPT, gpus=gpus, healthCheck={"collectiveBandwidth": bandwidth}, **spec)


def _pods(core: client.CoreV1Api, namespace: str, job: str, attempt: int) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={job},{LABEL_ATTEMPT}={attempt}").items


def test_a_two_node_job_measures_busbw_between_real_nodes(operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    core, custom = clients(cluster)
    # One pod per node: the ring's links cross from one node's bridge to the other's.
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _job("ring", 2, gpus=1))

    job = jobs.wait_phase(custom, namespace, "ring", "Succeeded", timeout=90)
    status = job["status"]
    assert status.get("attempt", 0) == 0, status
    rows = sorted(status["nodeStatuses"], key=lambda row: row["index"])
    nodes = {row["node"] for row in rows}
    assert len(nodes) == 2 and nodes <= real_node_names(), rows
    for row in rows:
        health = row["health"]
        assert (health["status"], health["reason"]) == ("Passed", "Healthy"), row
        figures = health["bandwidth"]
        # Two nodes: 2(n-1)/n is 1, busbw equals algbw.
        assert figures["busbwGbps"] == figures["algbwGbps"] > 0, figures
        assert figures["inboundGbps"] > MIN_GBPS and figures["outboundGbps"] > MIN_GBPS, figures
    figures = rows[0]["health"]["bandwidth"]
    print(f"\ncollective bandwidth between {rows[0]['node']} and {rows[1]['node']}: busbw {figures['busbwGbps']} "
          f"Gbit/s, links {figures['outboundGbps']} and {figures['inboundGbps']} Gbit/s")
    # Node 0's outbound link is node 1's inbound one: both ends report the one figure.
    assert rows[0]["health"]["bandwidth"]["outboundGbps"] == rows[1]["health"]["bandwidth"]["inboundGbps"]
    for pod in _pods(core, namespace, "ring", 0):
        log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="preflight")
        assert "collective ring formed: node" in log
        assert "node health check passed: collective bandwidth: busbw " in log
        assert "4 MiB ring all-reduce over 2 nodes, checksum ok" in log


def test_a_pod_whose_link_crawls_fails_its_node_which_is_excluded_and_the_gang_succeeds_elsewhere(
        real_operator: tuple[LocalCluster, str], operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, release_namespace = real_operator
    _, namespace = operator_namespace
    core, custom = clients(cluster)
    # The slow node is one the leading operator replica is not on: its reconciles go on undisturbed.
    slow = real_node_name(node_away_from_leader(core, release_namespace))
    others = sorted(real_node_names() - {slow})
    # A ring of three pods, so the blame rule can tell the slow pod from its neighbours, on every real node but
    # one, so the job still fits once the slow pod's node is excluded. With the other nodes cordoned, one pod
    # lands on the slow node (one pod per node) and its preflight waits for the two Pending peers' names, while
    # its link is shaped. Without the native gang, so the one pod is placed alone.
    assert ALL_BUT_ONE >= 3, "the blame rule needs a ring of three pods and a spare node"
    body = _job("crawl", ALL_BUT_ONE, gpus=1, scheduling={"nativePodGroup": False},
                # The gang recreated elsewhere (named: InPlace is the default here, and this trainer exits without
                # its peers, so no in-place restart could take it back).
                failurePolicy={"maxRestarts": 0, "backoff": {"initialSeconds": 5},
                               "restartStrategy": "BlockingRecreate"})
    _cordon(core, others, True)
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        pid = wait_for(lambda: find_pid(f"MULTINODE_NAMESPACE={namespace}", "MULTINODE_JOB_NAME=crawl",
                                        command="preflight"), timeout=60, what="the first pod's preflight running")
        [placed] = [p for p in _pods(core, namespace, "crawl", 0) if p.spec.node_name]
        assert placed.spec.node_name == slow
        with shaped_pod_link(pid, SLOW_RATE) as veth:
            assert "tbf" in qdiscs(veth) and "tbf" in qdiscs("eth0", pid)
            _cordon(core, others, False)
            status = wait_for(lambda: _verdict_and_exclusion(custom, namespace), timeout=60,
                              what="a CollectiveBandwidthLow verdict and the node in status.excludedNodes")
    finally:
        _cordon(core, others, False)

    [row] = [ns for ns in status["nodeStatuses"] if (ns.get("health") or {}).get("status") == "Failed"]
    index = int(placed.metadata.labels["multinode.dev/node-index"])
    assert (row["node"], row["index"], row["reason"]) == (slow, index, "NodeUnhealthy"), status
    assert row["health"]["reason"] == "CollectiveBandwidthLow"
    assert row["health"]["message"].startswith(
        f"both ring links of node {index} are below minGbps {MIN_GBPS}: "
        f"link from node {(index - 1) % ALL_BUT_ONE} "), row
    figures = row["health"]["bandwidth"]
    # 10 Mbit/s is 0.01 Gbit/s; the token bucket lets a burst through at first.
    assert 0.001 < figures["inboundGbps"] < 0.03 and 0.001 < figures["outboundGbps"] < 0.03, figures
    assert "busbwGbps" not in figures  # the all-reduce is skipped over a link known to crawl
    [excluded] = status["excludedNodes"]
    assert (excluded["node"], excluded["reason"]) == (slow, "CollectiveBandwidthLow"), status

    job = jobs.wait_phase(custom, namespace, "crawl", "Succeeded", timeout=120)
    status = job["status"]
    assert (status["attempt"], status.get("restarts", 0), status["uncountedRestarts"]) == (1, 0, 1), status
    assert status["restartHistory"][0]["reason"] == "NodeUnhealthy"
    # The slow pod's two neighbours ran on good nodes and each saw one slow link: had the blame rule failed them
    # too, their nodes would be excluded as well and the job would not fit on the nodes left.
    assert sorted(ns["node"] for ns in status["nodeStatuses"]) == others
    assert [e["node"] for e in status["excludedNodes"]] == [slow]
    for ns in status["nodeStatuses"]:
        assert ns["health"]["status"] == "Passed" and ns["health"]["bandwidth"]["busbwGbps"] > 0, ns


def _cordon(core: client.CoreV1Api, nodes: list[str], cordoned: bool) -> None:
    for node in nodes:
        core.patch_node(node, {"spec": {"unschedulable": cordoned}})


def _verdict_and_exclusion(custom: client.CustomObjectsApi, namespace: str) -> dict | None:
    status = jobs.get_job(custom, namespace, "crawl").get("status") or {}
    failed = [ns for ns in status.get("nodeStatuses", []) if (ns.get("health") or {}).get("status") == "Failed"]
    return status if failed and status.get("excludedNodes") else None
