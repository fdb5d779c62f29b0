"""stragglers.action Exclude on real nodes, under the operator installed by helm: it reads the trainers'
heartbeats from the kubelets' logs, and the Node objects decide whether the job still fits without a
straggler's node: a job's node pods never share a node (one pod per node), so each eligible node holds one.

- a job on every real node but one: without the straggler's node enough are left, so the node is excluded
  (reason Straggler), the gang restarts without counting on the other nodes, and succeeds;
- a job on every real node: excluding a node would strand it, so the straggler is only reported,
  the condition says why, and the job runs to the end in its first attempt.

Rank 1 of attempt 0 reports ten times the others' step time: it stands in for a rank on a slow node (a
throttled GPU); the next attempt's ranks all report the same time.
"""

from __future__ import annotations

import textwrap

from kubernetes import client
from localcluster import LocalCluster

from localcluster.harness.waiting import wait_for
from multinode.api import GROUP, LABEL_ATTEMPT, LABEL_JOB_NAME, PLURAL, VERSION
from tests.support import jobs
from tests.support.realnodes import ALL_BUT_ONE, REAL_NODES, clients, pod_log, real_job, real_node_names

SCRIPT = textwrap.dedent("""
    import os, time
    from multinode.progress import heartbeat
    rank, attempt = int(os.environ["NODE_RANK"]), int(os.environ["MULTINODE_ATTEMPT"])
    slow = rank == 1 and attempt == 0
    for step in range(1, int(os.environ["STEPS_ATTEMPT_%d" % min(attempt, 1)]) + 1):
        heartbeat(step, step_seconds=2.0 if slow else 0.2, min_interval=0)
        time.sleep(0.3)
    print(f"done attempt={attempt} rank={rank} host={os.environ['MULTINODE_HOST_NODE']}", flush=True)
""")
DETECTION = {"timeoutSeconds": 30, "stragglers": {"factor": 2.0, "forSeconds": 3, "action": "Exclude"}}


def _job(name: str, num_nodes: int, first_steps: int) -> dict:
    return real_job(name, num_nodes, SCRIPT, hangDetection=DETECTION,
                    failurePolicy={"maxRestarts": 0, "backoff": {"initialSeconds": 0}},
                    env=[{"name": "STEPS_ATTEMPT_0", "value": str(first_steps)},
                         {"name": "STEPS_ATTEMPT_1", "value": "20"}])


def _pods(core: client.CoreV1Api, namespace: str, job: str, attempt: int) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={job},{LABEL_ATTEMPT}={attempt}").items


def _rank_1_node(core: client.CoreV1Api, namespace: str, job: str) -> str | None:
    pods = [p for p in _pods(core, namespace, job, 0) if p.metadata.name.startswith(f"{job}-1-")]
    return pods[0].spec.node_name if pods and pods[0].spec.node_name else None


def test_a_straggler_node_is_excluded_and_the_gang_succeeds_without_it(
        operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    core, custom = clients(cluster)
    name = "slow-node"
    with jobs.PhaseRecorder(cluster.api_client(), namespace, name, timeout_seconds=300) as seen:
        body = _job(name, ALL_BUT_ONE, first_steps=400)
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        slow = wait_for(lambda: _rank_1_node(core, namespace, name), timeout=120, what="rank 1 of attempt 0 placed")
        final = jobs.wait_phase(custom, namespace, name, "Succeeded", timeout=300)
    status = final["status"]
    # maxRestarts 0: the restart did not count.
    assert (status["attempt"], status.get("restarts", 0), status["uncountedRestarts"]) == (1, 0, 1), status
    [record] = status["restartHistory"]
    assert (record["reason"], record["counted"], record["attempt"]) == ("Straggler", False, 0), record
    assert record["message"].startswith(f"rank 1 on node {slow}: 2s a step, the median "), record
    [excluded] = status["excludedNodes"]
    assert (excluded["node"], excluded["reason"]) == (slow, "Straggler"), excluded
    stragglers = [c for c in seen.conditions if c["type"] == "Stragglers" and c["status"] == "True"]
    assert stragglers and f"rank 1 on node {slow}: 2s a step" in stragglers[0]["message"], seen.conditions
    second = _pods(core, namespace, name, 1)
    assert {p.spec.node_name for p in second} == real_node_names() - {slow}, [p.spec.node_name for p in second]
    for pod in second:
        assert "done attempt=1" in pod_log(core, namespace, pod.metadata.name)
    assert not status["progress"].get("stragglers"), status["progress"]
    events = core.list_namespaced_event(namespace, field_selector="reason=Straggler").items
    assert any(f"node {slow}" in e.message and "excluded until" in e.message for e in events), events


def test_a_straggler_node_stays_when_the_job_would_not_fit_without_it(
        operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    core, custom = clients(cluster)
    name = "slow-no-room"
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _job(name, REAL_NODES, first_steps=120))
    slow = wait_for(lambda: _rank_1_node(core, namespace, name), timeout=120, what="rank 1 of attempt 0 placed")

    def held() -> dict | None:
        c = jobs.condition(jobs.get_job(custom, namespace, name), "Stragglers")
        return c if c and c["status"] == "True" and "not excluded" in c["message"] else None

    c = wait_for(held, timeout=120, what="condition Stragglers saying the node was not excluded")
    assert c["message"].endswith(f"not excluded: rank 1 on node {slow} (without {slow} the nodes left have room "
                                 f"for {REAL_NODES - 1} of the job's {REAL_NODES} pods)"), c
    final = jobs.wait_phase(custom, namespace, name, "Succeeded", timeout=180)
    status = final["status"]
    assert status.get("attempt", 0) == 0 and not status.get("excludedNodes") and not status.get("restartHistory")
