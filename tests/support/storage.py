"""PersistentVolumeClaims that the real PV controller binds, so pods that mount them can be scheduled."""

from __future__ import annotations

from kubernetes import client

from localcluster.harness.waiting import wait_for


def bound_claim(core: client.CoreV1Api, namespace: str, name: str, size: str = "100Gi",
                access: str = "ReadWriteMany") -> str:
    """Create a PV pre-bound to a new PVC and wait until the PV controller binds them; returns the PV name."""
    pv = f"{namespace}-{name}"
    core.create_persistent_volume({
        "metadata": {"name": pv, "labels": {"multinode.dev/test": "true"}},
        "spec": {"capacity": {"storage": size}, "accessModes": [access], "storageClassName": "manual",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/multinode-test-pv/{pv}"},
                 "claimRef": {"namespace": namespace, "name": name}},
    })
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": name},
        "spec": {"accessModes": [access], "storageClassName": "manual", "volumeName": pv,
                 "resources": {"requests": {"storage": size}}},
    })
    wait_for(lambda: core.read_namespaced_persistent_volume_claim(name, namespace).status.phase == "Bound",
             timeout=60, what=f"PVC {namespace}/{name} Bound")
    return pv
