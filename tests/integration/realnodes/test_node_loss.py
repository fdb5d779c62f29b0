"""A real node lost mid-job: its kubelet, containerd, shims and containers SIGKILLed at once, as a machine
losing power. Nothing tells the control plane; it finds out by missed heartbeats. The job keeps a hot spare
(spec.spareNodes: 1) and restarts in place (failurePolicy.restartStrategy InPlace): the node that dies is rank
0's, and the spare, scheduled, pulled (its image volume) and checked beforehand, takes rank 0 as soon as the
node's Lease stops renewing, well before the node turns NotReady; the leader moves with it (the other rank
finds the spare at MASTER_ADDR:MASTER_PORT, a plain TCP rendezvous); the pod on the node that lives restarts
in place (its trainer leaves the old attempt through multinode.progress.leave_on_new_attempt); nothing counts
against maxRestarts; and when the machine comes back its old pod is cleaned up, not rejoined. (A lost node's
pod replaced by a new pod, no spare: tests/integration/controller/test_lifecycle.py, on kwok nodes; a gang
recreated after a node loss too.)"""

from __future__ import annotations

import re
import textwrap
import time
from datetime import datetime, timezone

from kubernetes import client
from localcluster import LocalCluster

from multinode.api.timestamps import parse_time
from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from multinode.api.constants import ANNOTATION_ATTEMPT, LABEL_HOSTNAME
from tests.support import jobs
from localcluster.harness.kube import new_namespace
from tests.support.realnodes import clients, leading_operator, pod_log, real_job
from localcluster.harness.waiting import wait_for

JOB = "lossy"
NODES = 2  # and one spare: three of the four real nodes, none the leading operator replica's
# Attempt 0 trains until rank 0's node dies; the attempt after the loss finishes. Each attempt begins with a
# rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 listens, rank 1 connects and reads the attempt), so the env
# contract is checked as torch's TCPStore would use it. The rank on the node that lives leaves attempt 0 as soon
# as the operator declares attempt 1, as a trainer using multinode.progress does.
SCRIPT = textwrap.dedent("""
    import os, signal, socket, sys, time
    from multinode.progress import leave_on_new_attempt
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    attempt, rank = int(os.environ["MULTINODE_ATTEMPT"]), int(os.environ["NODE_RANK"])
    leader, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    leave_on_new_attempt()
    if rank == 0:
        with socket.create_server(("", port)) as server:
            peer, _ = server.accept()
            peer.sendall(str(attempt).encode())
            peer.close()
    else:
        deadline = time.monotonic() + 120
        while True:
            try:
                conn = socket.create_connection((leader, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        heard = conn.recv(16).decode()
        assert heard == str(attempt), (heard, attempt)
    print(f"training attempt={attempt} rank={rank} host={os.environ['MULTINODE_HOST_NODE']} leader={leader}",
          flush=True)
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
        if len(pods) == NODES and all(p.status.phase == "Running" and f"training attempt={attempt}"
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


def test_a_real_node_lost_mid_job_hands_rank_0_to_a_warm_spare_and_the_other_pod_restarts_in_place(
        real_operator: tuple[LocalCluster, str]) -> None:
    cluster, operator_namespace = real_operator
    core, custom = clients(cluster)
    namespace = new_namespace(core, prefix="realloss")
    # Off the leading operator replica's node: the node that dies must not take the operator with it.
    leader_node = _operator_node(core, operator_namespace)
    away = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": LABEL_HOSTNAME, "operator": "NotIn", "values": [leader_node]}]}]}}}
    killed = False
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, real_job(
            JOB, NODES, SCRIPT, pod_template={"affinity": away}, spareNodes=1,
            failurePolicy={"restartStrategy": "InPlace"}))
        before = wait_for(lambda: _training(core, namespace, 0), timeout=120, what="attempt 0 training")
        spare = wait_for(lambda: _waiting_spare(core, namespace), timeout=120, what="the spare waiting, warm")
        hosts = {node for _, node in before.values()}
        assert len(hosts | {spare.spec.node_name}) == NODES + 1 and leader_node not in hosts, (hosts, leader_node)
        doomed_pod = f"{JOB}-0-a0"
        doomed = before[doomed_pod][1]
        doomed_index = int(re.search(r"(\d+)$", doomed).group(1))

        cluster.kill_real_node(doomed_index)
        killed, lost_at = True, time.monotonic()

        # Stock timings: the node's Lease stops renewing (every 10 s); half its 40 s duration later the spare
        # takes rank 0, while the node is still Ready (NotReady only 40 s after its last heartbeat).
        after = wait_for(lambda: _training(core, namespace, 1), timeout=180,
                         what="attempt 1 training after the node loss")
        recovered_after = time.monotonic() - lost_at
        assert set(after) == {f"{JOB}-s0", f"{JOB}-1-a0"}, after
        assert after[f"{JOB}-s0"] == (spare.metadata.uid, spare.spec.node_name), "the spare, where it waited"
        assert after[f"{JOB}-1-a0"] == before[f"{JOB}-1-a0"], "the other pod stays: same UID, same node"
        assert f"leader={JOB}-s0.{JOB}.{namespace}.svc" in pod_log(core, namespace, f"{JOB}-1-a0"), \
            "rank 1 met rank 0 on the spare"
        status = jobs.get_job(custom, namespace, JOB)["status"]
        last = status["restartHistory"][-1]
        assert (last["attempt"], last["reason"], last["counted"], last["index"], last["spare"]) == \
            (0, "NodeLost", False, 0, 0), last
        assert "has not renewed its lease" in last["message"], last
        assert (status["restarts"], status["uncountedRestarts"], status["podsAttempt"]) == (0, 1, 0), status
        # Force-deleted with the loss (before the attempt reached the pods), while its node still reads Ready: no
        # kubelet would confirm a graceful deletion, and the job would read Restarting (WaitingForOldPods) until
        # the node turned NotReady.
        assert doomed_pod not in _names(core, namespace), "the dead node's pod is gone from the API"
        print(f"real node {doomed} killed: attempt 1 training on the spare after {recovered_after:.1f}s")

        final = jobs.wait_phase(custom, namespace, JOB, "Succeeded", timeout=120)
        assert final["status"]["attempt"] == 1
        for name in after:
            assert "done attempt=1" in pod_log(core, namespace, name)
        # The time the dead node cost is counted: the restart (Restarting while the other rank is held, Starting
        # while the gang's pods come back into the attempt: which of the two depends on when the other rank's
        # trainer noticed) and the first attempt's work (no checkpoint); and the spare's wait, as its own figure.
        goodput = final["status"]["goodput"]
        lost = goodput["lost"]
        assert lost["restart"] + lost["startup"] > 0 and lost["redone"] > 0 and lost["hang"] == 0, goodput
        assert goodput["spareSeconds"] > 0, goodput
        started, completed = (parse_time(final["status"][k], datetime.now(timezone.utc))
                              for k in ("startTime", "completionTime"))
        assert goodput["productiveSeconds"] + goodput["lostSeconds"] == (completed - started).total_seconds(), goodput
        print(f"goodput of the run with a killed node: {goodput}")

        # The machine comes back: its kubelet finds its pod deleted and finishes it off; it never rejoins.
        cluster.restart_real_node(doomed_index)
        killed = False
        assert doomed_pod not in _names(core, namespace)
        assert jobs.get_job(custom, namespace, JOB)["status"]["phase"] == "Succeeded"
    finally:
        if killed:
            cluster.restart_real_node(doomed_index)
        core.delete_namespace(namespace)


def _names(core: client.CoreV1Api, namespace: str) -> set[str]:
    return {p.metadata.name
            for p in core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items}


def _waiting_spare(core: client.CoreV1Api, namespace: str) -> client.V1Pod | None:
    """The spare, once its preflight runs on its node (its image pulled: the kubelet pulls the image volume
    before any container starts)."""
    try:
        pod = core.read_namespaced_pod(f"{JOB}-s0", namespace)
    except client.ApiException:
        return None
    running = [s for s in pod.status.init_container_statuses or [] if s.state.running]
    return pod if pod.spec.node_name and running and pod.status.phase == "Pending" else None
