"""The Kueue Workload of a queued job (integrations/kueue/workload.py): the node pod as the operator renders it, cut
to what Kueue reads."""

from __future__ import annotations

from multinode.render import render_node_pod
from multinode.integrations.kueue.workload import pod_set_template, render_workload, workload_name
from multinode.testing import stored_job


def queued(**spec):
    job = stored_job(4, resourcesPerNode={"gpus": 8}, network={"rdma": {"count": 1}}, **spec)
    job.metadata.labels = {"kueue.x-k8s.io/queue-name": "gpus"}
    return job


def test_the_pod_set_asks_for_what_the_node_pod_asks_for() -> None:
    job = queued(podTemplate={"nodeSelector": {"pool": "h100"}, "priorityClassName": "training"})
    pod = render_node_pod(job, 0, 0)
    template = pod_set_template(job)
    for kind in ("containers", "initContainers"):
        assert [(c["name"], c["resources"]) for c in template["spec"][kind]] == \
               [(c["name"], c.get("resources")) for c in pod["spec"][kind]]
    assert template["spec"]["containers"][0]["resources"]["limits"]["rdma/hca_shared_devices_a"] == "1"
    assert template["spec"]["nodeSelector"] == pod["spec"]["nodeSelector"]
    assert template["spec"]["tolerations"] == pod["spec"]["tolerations"]
    assert template["spec"]["priorityClassName"] == "training"
    assert "env" not in template["spec"]["containers"][0] and "volumes" not in template["spec"]


def test_one_workload_per_job_named_after_it() -> None:
    job = queued()
    workload = render_workload(job)
    assert workload["metadata"]["name"] == workload_name("llama", "uid-123")
    assert workload_name("llama", "uid-123") != workload_name("llama", "uid-456")
    assert len(workload_name("x" * 63, "uid")) <= 253
    assert workload["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpus"
    assert workload["spec"]["podSets"][0]["count"] == 4
    assert "priorityClassRef" not in workload["spec"] and "priority" not in workload["spec"]
