"""The operator's /metrics, scraped during a run and parsed with prometheus-client's parser."""

from __future__ import annotations

from kubernetes import client

from multinode.testing import training_job
from tests.support import jobs
from tests.support.jobs import EXIT_CODE, FINISH_AFTER
from localcluster.harness.operator import OperatorProcess
from localcluster.harness.waiting import wait_for

OPERATOR_METRICS = {
    "multinode_trainingjobs", "multinode_pods_created", "multinode_restarts", "multinode_reconcile_duration_seconds",
    "multinode_job_pods_created_seconds", "multinode_job_running_seconds", "multinode_api_errors",
    "multinode_work_queue_depth",
}


def value(samples: list, name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_metrics_count_what_the_operator_did(
    api: client.ApiClient, core: client.CoreV1Api, kubeconfig: str, job_namespace: str, operator: OperatorProcess
) -> None:
    ns, custom = job_namespace, client.CustomObjectsApi(api)
    before = operator.metrics()
    jobs.apply(kubeconfig, ns, training_job("measured", 3, failurePolicy={"backoff": {"initialSeconds": 0}}))
    jobs.wait_phase(custom, ns, "measured", "Running")
    core.patch_namespaced_pod("measured-2-a0", ns, {"metadata": {"annotations": {FINISH_AFTER: "0s", EXIT_CODE: "1"}}})
    wait_for(lambda: (jobs.get_job(custom, ns, "measured").get("status") or {}).get("attempt") == 1
             and jobs.get_job(custom, ns, "measured")["status"].get("phase") == "Running", timeout=60,
             what="attempt 1 running")

    after = operator.metrics()

    assert OPERATOR_METRICS <= set(after), OPERATOR_METRICS - set(after)
    created = value(after["multinode_pods_created"], "multinode_pods_created_total") - \
        value(before["multinode_pods_created"], "multinode_pods_created_total")
    # Two attempts of three pods (other tests' leftovers may add, never subtract).
    assert created >= 6
    restarts = value(after["multinode_restarts"], "multinode_restarts_total", reason="PodFailed", counted="true")
    assert restarts >= 1
    assert value(after["multinode_trainingjobs"], "multinode_trainingjobs", phase="Running") >= 1
    assert value(after["multinode_job_running_seconds"], "multinode_job_running_seconds_count") >= 1
    assert value(after["multinode_job_pods_created_seconds"], "multinode_job_pods_created_seconds_count") >= 1
    assert value(after["multinode_reconcile_duration_seconds"], "multinode_reconcile_duration_seconds_count") > 0
