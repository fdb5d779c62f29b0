"""A real node lost mid-job: its kubelet, containerd, shims and containers SIGKILLed at once, as a machine
losing power. Nothing tells the control plane; it finds out by missed heartbeats. The operator restarts
the gang without counting it against maxRestarts, the new attempt runs on the real nodes that remain (the job
is one node smaller than the cluster, one pod per node), and when the machine comes back its old pods are
cleaned up, not rejoined."""

from __future__ import annotations

import re
import textwrap
import time
from datetime import datetime, timezone

from kubernetes import client
from localcluster import LocalCluster

from multinode.api.timestamps import parse_time
from multinode.api import GROUP, LABEL_ATTEMPT, LABEL_JOB_NAME, PLURAL, VERSION
from tests.support import jobs
from localcluster.harness.kube import new_namespace
from tests.support.realnodes import ALL_BUT_ONE, clients, leading_operator, pod_log, real_job, real_node_names
from localcluster.harness.waiting import wait_for

JOB = "lossy"
# Attempt 0 trains until its node dies; the attempt after the loss finishes. Its ranks on the nodes that live
# exit on SIGTERM when the gang is deleted, as a trainer does: python as PID 1 would ignore the signal and hold
# the (blocking) restart for the 30 s grace period.
SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    attempt, rank = int(os.environ["MULTINODE_ATTEMPT"]), int(os.environ["NODE_RANK"])
    print(f"training attempt={attempt} rank={rank} host={os.environ['MULTINODE_HOST_NODE']}", flush=True)
    time.sleep(3600 if attempt == 0 else 5)
    print(f"done attempt={attempt} rank={rank}", flush=True)
""")


def _attempt_pods(core: client.CoreV1Api, namespace: str, attempt: int) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={JOB},{LABEL_ATTEMPT}={attempt}").items


def _running_on(core: client.CoreV1Api, namespace: str, attempt: int) -> set[str] | None:
    pods = _attempt_pods(core, namespace, attempt)
    running = all(p.status.phase == "Running" and not p.metadata.deletion_timestamp for p in pods)
    if len(pods) == ALL_BUT_ONE and running:
        return {p.spec.node_name for p in pods}
    return None


def _operator_node(core: client.CoreV1Api, operator_namespace: str) -> str:
    """The node of the replica that leads (the chart runs two; the Lease names the leader's pod)."""
    leader = leading_operator(core, operator_namespace)
    assert leader is not None, "one live operator replica holds the Lease"
    return leader.spec.node_name


def test_a_real_node_lost_mid_job_restarts_the_gang_on_the_remaining_nodes(
        real_operator: tuple[LocalCluster, str]) -> None:
    cluster, operator_namespace = real_operator
    core, custom = clients(cluster)
    namespace = new_namespace(core, prefix="realloss")
    # A job on every real node but one: one at least of its nodes is not the leading operator replica's. That
    # one dies, and the new attempt has exactly the nodes left, the leader's among them.
    leader_node = _operator_node(core, operator_namespace)
    killed = False
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, real_job(JOB, ALL_BUT_ONE, SCRIPT))
        hosts = wait_for(lambda: _running_on(core, namespace, 0), timeout=120, what="attempt 0 Running")
        assert len(hosts) == ALL_BUT_ONE and hosts <= real_node_names(), hosts
        doomed = min(hosts - {leader_node})
        doomed_index = int(re.search(r"(\d+)$", doomed).group(1))
        wait_for(lambda: all("training attempt=0" in pod_log(core, namespace, p.metadata.name)
                             for p in _attempt_pods(core, namespace, 0)), timeout=60, what="attempt 0 training")

        cluster.kill_real_node(doomed_index)
        killed, lost_at = True, time.monotonic()

        # Stock timings: NotReady after the 40 s grace period, then the pods' 5 s node-loss toleration.
        hosts = wait_for(lambda: _running_on(core, namespace, 1), timeout=180,
                         what="attempt 1 Running after the node loss")
        recovered_after = time.monotonic() - lost_at
        assert hosts == real_node_names() - {doomed}, hosts
        status = jobs.get_job(custom, namespace, JOB)["status"]
        last = status["restartHistory"][-1]
        assert (last["attempt"], last["reason"], last["counted"]) == (0, "NodeLost", False), last
        assert (status["restarts"], status["uncountedRestarts"]) == (0, 1), status
        print(f"real node {doomed} killed: attempt 1 Running after {recovered_after:.1f}s")

        final = jobs.wait_phase(custom, namespace, JOB, "Succeeded", timeout=120)
        assert final["status"]["attempt"] == 1
        for pod in _attempt_pods(core, namespace, 1):
            assert "done attempt=1" in pod_log(core, namespace, pod.metadata.name)
        # The time the dead node cost is counted: the restart and the first attempt's work (no checkpoint).
        goodput = final["status"]["goodput"]
        lost = goodput["lost"]
        assert lost["restart"] > 0 and lost["redone"] > 0 and lost["hang"] == 0, goodput
        started, completed = (parse_time(final["status"][k], datetime.now(timezone.utc))
                              for k in ("startTime", "completionTime"))
        assert goodput["productiveSeconds"] + goodput["lostSeconds"] == (completed - started).total_seconds(), goodput
        print(f"goodput of the run with a killed node: {goodput}")

        # The machine comes back: its kubelet finds its pods deleted and finishes them off; none rejoins.
        cluster.restart_real_node(doomed_index)
        killed = False
        wait_for(lambda: not _attempt_pods(core, namespace, 0), timeout=120,
                 what="attempt 0's pods gone once their node is back")
        assert len(_attempt_pods(core, namespace, 1)) == ALL_BUT_ONE
        assert jobs.get_job(custom, namespace, JOB)["status"]["phase"] == "Succeeded"
    finally:
        if killed:
            cluster.restart_real_node(doomed_index)
        core.delete_namespace(namespace)
