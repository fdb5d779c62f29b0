"""The headless Service that gives every node pod a stable DNS name."""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob
from multinode.render.names import (
    common_labels,
    job_identity,
    owner_reference,
    selector_labels,
    service_name,
)

RENDEZVOUS_PORT_NAME = "rendezvous"


def render_headless_service(job: TrainingJob) -> dict[str, Any]:
    """Service "<job>": headless, and publishing pods before they are ready.

    publishNotReadyAddresses matters: node pods are never "ready" while their
    preflight init container waits for node 0's DNS record, so without it the
    records would wait for readiness and the gang would deadlock.
    """
    identity = job_identity(job)
    port = job.spec.network.rendezvous_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(identity.name),
            "namespace": identity.namespace,
            "labels": common_labels(identity.name),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            # The string "None", not null: that is how the API spells a headless Service.
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(identity.name),
            "ports": [
                {
                    "name": RENDEZVOUS_PORT_NAME,
                    "port": port,
                    "targetPort": port,
                    "protocol": "TCP",
                }
            ],
        },
    }
