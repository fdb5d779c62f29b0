"""`kubectl drain` of a node of a running job, on real nodes with the chart's operator (its RBAC and admission
policies: the job's PodDisruptionBudget is one the operator may create). With
checkpointing.beforeDisruptionSeconds the drain waits while the trainer saves on request; the gang then moves
off the node and resumes from that checkpoint, losing no step. (A trainer that never answers, and a job
without checkpointing, are tests/integration/controller/test_drain.py, on kwok nodes.)"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import yaml
from kubernetes import client
from localcluster import LocalCluster

from localcluster.harness import realexample
from localcluster.harness.drain import BUDGET_REFUSED, draining
from localcluster.harness.kube import allow_host_path, kubectl, new_namespace
from localcluster.harness.waiting import wait_for
from multinode.api import LABEL_JOB_NAME
from tests.support import jobs
from tests.support.realnodes import attempt_logs, clients, follow_log, leading_operator

JOB = "real-train"
STEP = re.compile(r"^step=(\d+) rank=(\d+) loss=", re.M)


def _status(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    return jobs.get_job(custom, namespace, name).get("status") or {}


def _follow(core: client.CoreV1Api, namespace: str, pods: list[str]) -> tuple[list[threading.Thread], dict]:
    """Each pod's whole trainer log, read until its container ends (the pods are deleted by the move)."""
    logs: dict[str, str] = {}

    def read(pod: str) -> None:
        logs[pod] = follow_log(core, namespace, pod, "trainer")
    threads = [threading.Thread(target=read, args=(pod,), daemon=True) for pod in pods]
    for thread in threads:
        thread.start()
    return threads, logs


def test_a_drain_waits_for_the_requested_checkpoint_and_training_resumes_from_it_elsewhere(
        real_operator: tuple[LocalCluster, str], tmp_path: Path) -> None:
    cluster, operator_namespace = real_operator
    core, custom = clients(cluster)
    namespace = new_namespace(core, prefix="realdrain")
    allow_host_path(core, namespace)
    kc = str(cluster.kubeconfig)
    folder = realexample.write_manifests(cluster.registry, tmp_path)
    manifest = yaml.safe_load((folder / "trainingjob.yaml").read_text())
    assert manifest["spec"]["checkpointing"]["beforeDisruptionSeconds"] > 0, "the example asks for it"
    # No periodic checkpoint: the only one is the one the drain asks for, so the resume proves it was taken.
    realexample.set_env(manifest, TRAIN_STEPS="100000", CHECKPOINT_EVERY="0")
    (folder / "trainingjob.yaml").write_text(yaml.safe_dump(manifest))
    try:
        kubectl(kc, "apply", "-n", namespace, "-f", str(folder))

        def training(attempt: int, past: int = 0):
            logs = attempt_logs(core, namespace, JOB, attempt)
            steps = [[int(s) for s, _ in STEP.findall(log)] for log in logs.values()]
            return logs if len(logs) == 2 and all(s and s[-1] > past for s in steps) else None

        wait_for(lambda: training(0, past=3), timeout=300, what="both ranks of attempt 0 past step 3")
        pods = {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(
            namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items}
        leader = wait_for(lambda: leading_operator(core, operator_namespace), timeout=60, what="a leader")
        node = next(n for name, n in sorted(pods.items()) if n != leader.spec.node_name)
        followers, old_logs = _follow(core, namespace, sorted(pods))

        # The node stays cordoned until attempt 1 is placed, as it does for the admin's maintenance: the
        # move is off it, not back onto it once it is uncordoned.
        with draining(kc, node) as drain:
            request = wait_for(lambda: (r := _status(custom, namespace, JOB).get("checkpointRequest")) and
                               r["state"] != "Requested" and r, timeout=150, what="the checkpoint request answered")
            assert (request["reason"], request["state"]) == ("NodeCordoned", "Mirrored"), request
            code, output = drain.wait(timeout=180)
            assert code == 0, output
            assert BUDGET_REFUSED in output, f"the budget held the drain until the gang moved:\n{output}"

            status = wait_for(lambda: (s := _status(custom, namespace, JOB)).get("attempt") == 1 and s,
                              timeout=60, what="attempt 1")
            record = status["restartHistory"][-1]
            assert (record["reason"], record["counted"]) == ("NodeDrained", False), record
            resumed = wait_for(lambda: _status(custom, namespace, JOB).get("resumedFrom"), timeout=120,
                               what="status.resumedFrom")
            assert resumed.endswith("/" + request["checkpoint"])
            logs = wait_for(lambda: training(1), timeout=300, what="both ranks of attempt 1 logging steps")
            assert node not in {p.spec.node_name for p in core.list_namespaced_pod(
                namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items if p.metadata.name.endswith("-a1")}

        for thread in followers:
            thread.join(timeout=60)
        saved = int(re.search(r"step-(\d+)", request["checkpoint"]).group(1))
        last_trained = max(int(s) for log in old_logs.values() for s, _ in STEP.findall(log))
        lost = last_trained - saved
        assert lost <= 1, f"attempt 0 trained to step {last_trained}, the drain's checkpoint is of step {saved}"
        assert all("holding for the move" in log for log in old_logs.values()), old_logs
        for log in logs.values():
            assert f"resumed_from={resumed}" in log
            assert int(STEP.findall(log)[0][0]) == saved + 1
    finally:
        core.delete_namespace(namespace)
