"""status.goodput of a real run on kwok nodes: a node's trainer fails, the gang restarts after its backoff,
the next attempt succeeds.

kwok pods print no logs and write no heartbeats, so this job reports no progress: startup ends when all
pods run, and hang is never counted. The progress-based causes are covered by
tests/unit/reconcile/test_goodput.py.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from kubernetes import client

from localcluster.harness.kube import kubectl
from localcluster.harness.operator import OperatorProcess
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from multinode.api.timestamps import parse_time
from tests.support import jobs
from tests.support.jobs import EXIT_CODE, FINISH_AFTER

BACKOFF_SECONDS = 3


def seconds(value: str) -> datetime:
    return parse_time(value, like=datetime.now(timezone.utc))


def test_a_restarted_job_accounts_every_second_once(
    api: client.ApiClient, core: client.CoreV1Api, kubeconfig: str, job_namespace: str, operator: OperatorProcess
) -> None:
    ns, custom = job_namespace, client.CustomObjectsApi(api)
    backoff = {"backoff": {"initialSeconds": BACKOFF_SECONDS}}
    jobs.apply(kubeconfig, ns, training_job("goodput", 2, failurePolicy=backoff))
    jobs.wait_phase(custom, ns, "goodput", "Running")
    # kwok's own timers, not sleeps in the test: node 1 fails after 2 s of running, attempt 1 succeeds after 3 s.
    core.patch_namespaced_pod("goodput-1-a0", ns, {"metadata": {"annotations": {FINISH_AFTER: "2s", EXIT_CODE: "1"}}})
    wait_for(lambda: (jobs.get_job(custom, ns, "goodput").get("status") or {}).get("attempt") == 1
             and jobs.get_job(custom, ns, "goodput")["status"].get("phase") == "Running", timeout=60,
             what="attempt 1 running")
    for i in range(2):
        core.patch_namespaced_pod(f"goodput-{i}-a1", ns, {"metadata": {"annotations": {FINISH_AFTER: "3s"}}})
    job = jobs.wait_phase(custom, ns, "goodput", "Succeeded")

    status = job["status"]
    goodput = status["goodput"]
    print("goodput of a kwok run with one forced restart:", json.dumps(goodput))  # the figures, with -s
    lost = goodput["lost"]
    assert status["restartHistory"][0]["reason"] == "PodFailed"
    # The backoff (and deleting attempt 0's pods) is lost to the restart; whole seconds, so at least 2 of 3.
    assert lost["restart"] >= BACKOFF_SECONDS - 1
    # No checkpointing: all attempt 0 trained is done again; attempt 1's running time is kept.
    assert lost["redone"] >= 1 and goodput["productiveSeconds"] >= 2
    assert lost["hang"] == 0
    assert goodput["lostSeconds"] == sum(lost.values())
    total = goodput["productiveSeconds"] + goodput["lostSeconds"]
    assert goodput["percent"] == goodput["productiveSeconds"] * 100 // total
    # Every second from the first pods to the end is counted once, and the clock stopped when the job finished.
    assert goodput["accountedUntil"] == status["completionTime"]
    assert total == (seconds(status["completionTime"]) - seconds(status["startTime"])).total_seconds()
    wall = (seconds(status["completionTime"]) - seconds(job["metadata"]["creationTimestamp"])).total_seconds()
    assert total <= wall

    # kubectl get tj shows the percentage (and the step column, empty: this job reports no progress).
    header, row = kubectl(kubeconfig, "get", "tj", "goodput", "-n", ns).stdout.splitlines()
    assert "STEP" in header and "GOODPUT %" in header
    assert row[header.index("GOODPUT %"):].split()[0] == str(goodput["percent"]), (header, row)

    # The operator's gauges copy the status it wrote.
    def scraped() -> dict[tuple[str, str], float]:
        samples = operator.metrics().get("multinode_trainingjob_goodput_seconds", [])
        return {(s.labels["kind"], s.labels["cause"]): s.value for s in samples
                if s.labels["namespace"] == ns and s.labels["job"] == "goodput"}

    expected = {("productive", ""): goodput["productiveSeconds"], **{("lost", c): v for c, v in lost.items()}}
    wait_for(lambda: scraped() == expected, timeout=30, what=f"goodput metrics {expected}")
