"""Creating and updating TrainingJobs against the apiserver and reading its rejections."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from multinode.api import GROUP, PLURAL, VERSION
from multinode.testing import full_job


@dataclass(frozen=True)
class Rejection:
    status: int
    message: str
    fields: tuple[str, ...]  # the field of every cause the apiserver listed

    def names(self, field: str) -> bool:
        """The message names the field and a cause points at it (Strict decoding lists no causes)."""
        return field in self.message and (not self.fields or field in self.fields)


def _rejection(error: client.ApiException) -> Rejection:
    body = json.loads(error.body)
    causes = (body.get("details") or {}).get("causes") or []
    return Rejection(error.status, body["message"], tuple(c.get("field", "") for c in causes))


def create(custom: client.CustomObjectsApi, namespace: str, body: dict, *, dry_run: bool = True,
           strict: bool = False) -> dict:
    kwargs = {"dry_run": "All"} if dry_run else {}
    if strict:
        kwargs["field_validation"] = "Strict"
    return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body, **kwargs)


def create_rejected(custom: client.CustomObjectsApi, namespace: str, body: dict, *, strict: bool = False) -> Rejection:
    try:
        create(custom, namespace, body, strict=strict)
    except client.ApiException as e:
        return _rejection(e)
    raise AssertionError(f"the apiserver accepted an invalid TrainingJob: {body}")


def replace(custom: client.CustomObjectsApi, namespace: str, body: dict, *, dry_run: bool = True) -> dict:
    kwargs = {"dry_run": "All"} if dry_run else {}
    name = body["metadata"]["name"]
    return custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body, **kwargs)


def replace_rejected(custom: client.CustomObjectsApi, namespace: str, body: dict) -> Rejection:
    try:
        replace(custom, namespace, body)
    except client.ApiException as e:
        return _rejection(e)
    raise AssertionError(f"the apiserver accepted an invalid update: {body['spec']}")


# The admission edge cases full_job() does not carry, each at its path under spec (an index one past the end
# of a list appends): values a schema pattern or CEL rule could wrongly refuse, and the apiserver must store as sent.
EDGE_CASES: dict[tuple[str | int, ...], Any] = {
    # A shell line that references NNODES, a name the env rule reserves: referencing it is not defining it.
    ("command",): ["bash", "-c"],
    ("args",): ["torchrun --nnodes $(NNODES) train.py --lr 3e-4"],
    # An empty value is a value (the env rule refuses value together with valueFrom, not an empty one).
    ("env", 2): {"name": "EMPTY", "value": ""},
    # Millicores: the quantity pattern's suffix branch, where full_job() has a plain number.
    ("resourcesPerNode", "cpu"): "95500m",
    # Multus's <namespace>/<name>@<interface> form, beside the plain name.
    ("network", "multusNetworks", 1): "kube-system/ib-b@net2",
    # Prefixed keys, as Kubernetes' well-known labels have; an annotation value is free text (newlines, no
    # label-value pattern).
    ("podTemplate", "labels", "app.kubernetes.io/part-of"): "llama",
    ("podTemplate", "nodeSelector", "topology.kubernetes.io/zone"): "zone-a",
    ("podTemplate", "annotations", "example.com/script"): "#!/bin/bash\necho hi\n",
    # No key: tolerates every taint of its effect.
    ("podTemplate", "tolerations", 2): {"operator": "Exists", "effect": "PreferNoSchedule"},
    # A memory emptyDir named and mounted next to the reserved 'dshm' and /dev/shm: those rules match exactly.
    ("podTemplate", "volumes", 2): {"name": "dshm-extra", "emptyDir": {"medium": "Memory"}},
    ("podTemplate", "volumeMounts", 2): {"name": "dshm-extra", "mountPath": "/dev/shmem"},
    # The other member of each enum, and resource names other than the defaults, where full_job() sets the
    # usual one: admission must accept every value, not only the common ones.
    ("resourcesPerNode", "gpuResourceName"): "amd.com/gpu",
    ("network", "hostNetwork"): True,
    ("network", "rdma", "resourceName"): "nvidia.com/mlnxnics",
    ("network", "nccl", "debug"): "TRACE",
    ("successPolicy",): "LeaderOnly",
    ("checkpointing", "completion"): "deepspeed",
    # (restartStrategy stays InPlace: full_job() has spares, which need it; Recreate is test_rejected's case.)
    ("spareNodes",): 4,  # as many as numNodes, the most allowed
    ("imageConsistency", "onMismatch"): "Report",
    ("hangDetection", "stragglers", "action"): "Exclude",
    ("cleanPodPolicy",): "All",
}


def maximal_job(name: str) -> dict:
    """A TrainingJob that sets every field of the spec (test_accepted checks that it still does): full_job()'s
    spec with EDGE_CASES, sent as a user would (no status; of the metadata, the name and labels)."""
    full = full_job()
    spec = full["spec"]
    for (*parents, last), value in EDGE_CASES.items():
        node: Any = spec
        for part in parents:
            node = node[part]
        if isinstance(node, list) and last == len(node):
            node.append(copy.deepcopy(value))
        else:
            node[last] = copy.deepcopy(value)
    return {"apiVersion": full["apiVersion"], "kind": full["kind"],
            "metadata": {"name": name, "labels": full["metadata"]["labels"]}, "spec": spec}
