from __future__ import annotations

from multinode.testing import stored_job

from multinode.render import render_headless_service, render_node_pod


def test_headless_service() -> None:
    service = render_headless_service(stored_job(network={"rendezvousPort": 23456}))
    assert service["apiVersion"] == "v1"
    assert service["kind"] == "Service"
    meta = service["metadata"]
    assert (meta["name"], meta["namespace"]) == ("llama", "ml")
    assert meta["labels"]["multinode.dev/job-name"] == "llama"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "multinode"
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("TrainingJob", "uid-123", True)
    spec = service["spec"]
    assert spec["clusterIP"] == "None"  # the string: a headless Service
    assert spec["publishNotReadyAddresses"] is True
    assert spec["selector"] == {"multinode.dev/job-name": "llama"}
    assert spec["ports"] == [
        {"name": "rendezvous", "port": 23456, "targetPort": 23456, "protocol": "TCP"}
    ]


def test_service_selects_the_pods_it_names() -> None:
    job = stored_job(num_nodes=3)
    service, pods = render_headless_service(job), [render_node_pod(job, i, 1) for i in range(3)]
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        assert pod["spec"]["subdomain"] == service["metadata"]["name"]
