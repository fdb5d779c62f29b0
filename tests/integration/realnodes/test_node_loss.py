"""A real node lost mid-job: its kubelet, containerd, shims and containers SIGKILLed at once, as a machine
losing power. Nothing tells the control plane; it finds out by missed heartbeats. The job restarts in place
(failurePolicy.restartStrategy InPlace): only the lost node's pod is replaced, on the real node the job did
not use, without counting it against maxRestarts; the pods on the nodes that live restart in place (their
trainers leave the old attempt through multinode.progress.leave_on_new_attempt) and join the replacement's
rendezvous; and when the machine comes back its old pod is cleaned up, not rejoined. (A gang recreated after
a node loss: tests/integration/controller/test_lifecycle.py, on kwok nodes.)"""

from __future__ import annotations

import re
import textwrap
import time
from datetime import datetime, timezone

from kubernetes import client
from localcluster import LocalCluster

from multinode.api.timestamps import parse_time
from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from multinode.api.constants import ANNOTATION_ATTEMPT
from tests.support import jobs
from localcluster.harness.kube import new_namespace
from tests.support.realnodes import ALL_BUT_ONE, clients, leading_operator, pod_log, real_job, real_node_names
from localcluster.harness.waiting import wait_for

JOB = "lossy"
# Attempt 0 trains until its node dies; the attempt after the loss finishes. The ranks on the nodes that live
# leave attempt 0 as soon as the operator declares attempt 1, as a trainer using multinode.progress does.
SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    from multinode.progress import leave_on_new_attempt
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    attempt, rank = int(os.environ["MULTINODE_ATTEMPT"]), int(os.environ["NODE_RANK"])
    print(f"training attempt={attempt} rank={rank} host={os.environ['MULTINODE_HOST_NODE']}", flush=True)
    leave_on_new_attempt()
    time.sleep(3600 if attempt == 0 else 5)
    print(f"done attempt={attempt} rank={rank}", flush=True)
""")


def _attempt_pods(core: client.CoreV1Api, namespace: str, attempt: int) -> list[client.V1Pod]:
    """The job's pods that run `attempt` (their annotation says so: restarted in place, or made for it)."""
    return [p for p in core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items
            if (p.metadata.annotations or {}).get(ANNOTATION_ATTEMPT) == str(attempt)
            and not p.metadata.deletion_timestamp]


def _training(core: client.CoreV1Api, namespace: str, attempt: int) -> dict[str, tuple[str, str]] | None:
    """Pod name → (uid, node) once every rank trains `attempt`."""
    pods = _attempt_pods(core, namespace, attempt)
    try:
        if len(pods) == ALL_BUT_ONE and all(p.status.phase == "Running" and f"training attempt={attempt}"
                                            in pod_log(core, namespace, p.metadata.name) for p in pods):
            return {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in pods}
    except client.ApiException:
        pass  # a container the kubelet is restarting in place has no log for a moment (400)
    return None


def _operator_node(core: client.CoreV1Api, operator_namespace: str) -> str:
    """The node of the replica that leads (the chart runs two; the Lease names the leader's pod)."""
    leader = leading_operator(core, operator_namespace)
    assert leader is not None, "one live operator replica holds the Lease"
    return leader.spec.node_name


def test_a_real_node_lost_mid_job_costs_only_its_pod_and_the_others_restart_in_place(
        real_operator: tuple[LocalCluster, str]) -> None:
    cluster, operator_namespace = real_operator
    core, custom = clients(cluster)
    namespace = new_namespace(core, prefix="realloss")
    # A job on every real node but one: one at least of its nodes is not the leading operator replica's. That
    # one dies, and its pod moves to the node the job did not use.
    leader_node = _operator_node(core, operator_namespace)
    killed = False
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, real_job(
            JOB, ALL_BUT_ONE, SCRIPT, failurePolicy={"restartStrategy": "InPlace"}))
        before = wait_for(lambda: _training(core, namespace, 0), timeout=120, what="attempt 0 training")
        hosts = {node for _, node in before.values()}
        assert len(hosts) == ALL_BUT_ONE and hosts <= real_node_names(), hosts
        doomed = min(hosts - {leader_node})
        doomed_pod = next(name for name, (_, node) in before.items() if node == doomed)
        doomed_index = int(re.search(r"(\d+)$", doomed).group(1))

        cluster.kill_real_node(doomed_index)
        killed, lost_at = True, time.monotonic()

        # Stock timings: NotReady after the 40 s grace period, then the pods' 5 s node-loss toleration.
        after = wait_for(lambda: _training(core, namespace, 1), timeout=180,
                         what="attempt 1 training after the node loss")
        recovered_after = time.monotonic() - lost_at
        assert {node for _, node in after.values()} == real_node_names() - {doomed}, after
        survivors = {name: uid_node for name, uid_node in before.items() if name != doomed_pod}
        assert {name: after[name] for name in survivors} == survivors, "the other pods stay: same UIDs, nodes"
        rank = int(re.search(r"-(\d+)-a0$", doomed_pod).group(1))
        assert set(after) - set(survivors) == {f"{JOB}-{rank}-a1"}, after
        status = jobs.get_job(custom, namespace, JOB)["status"]
        last = status["restartHistory"][-1]
        assert (last["attempt"], last["reason"], last["counted"], last["index"]) == (0, "NodeLost", False, rank)
        assert (status["restarts"], status["uncountedRestarts"], status["podsAttempt"]) == (0, 1, 0), status
        print(f"real node {doomed} killed: attempt 1 training after {recovered_after:.1f}s")

        final = jobs.wait_phase(custom, namespace, JOB, "Succeeded", timeout=120)
        assert final["status"]["attempt"] == 1
        for name in after:
            assert "done attempt=1" in pod_log(core, namespace, name)
        # The time the dead node cost is counted: the restart and the first attempt's work (no checkpoint).
        goodput = final["status"]["goodput"]
        lost = goodput["lost"]
        assert lost["restart"] > 0 and lost["redone"] > 0 and lost["hang"] == 0, goodput
        started, completed = (parse_time(final["status"][k], datetime.now(timezone.utc))
                              for k in ("startTime", "completionTime"))
        assert goodput["productiveSeconds"] + goodput["lostSeconds"] == (completed - started).total_seconds(), goodput
        print(f"goodput of the run with a killed node: {goodput}")

        # The machine comes back: its kubelet finds its pod deleted and finishes it off; it never rejoins.
        cluster.restart_real_node(doomed_index)
        killed = False
        names = {p.metadata.name for p in core.list_namespaced_pod(
            namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items}
        assert doomed_pod not in names and set(after) <= names
        assert jobs.get_job(custom, namespace, JOB)["status"]["phase"] == "Succeeded"
    finally:
        if killed:
            cluster.restart_real_node(doomed_index)
        core.delete_namespace(namespace)
