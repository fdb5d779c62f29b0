"""An elastic job's rendezvous (spec.elastic): torchrun's c10d backend, on a store pod of its own.

torchrun's c10d rendezvous keeps its state in a TCPStore; by default the agent on the endpoint's host serves
it, so the node holding it takes the rendezvous down with it (the peers' issue: rank 0 dies, the job dies).
Here the store is a pod of its own per attempt, `<job>-rdzv-a<attempt>`, named `<job>-rdzv` under the job's
headless Service, on a machine that runs no training pod: any training node, rank 0's included, may go and the
rendezvous stays. It is made once the attempt's pods are placed, required off their machines; where no other
machine fits it, it is made again sharing one (reconcile/rendezvous_store.py). It runs torch's own TCPStore
server in the trainer's image and environment (torch is what the trainer has anyway), so the wire protocol is
torch's whatever its version. Every agent is a client of it (is_host=false); the workers' own store is made
fresh by each round's rank 0 (TORCH_DISABLE_SHARE_RDZV_TCP_STORE: with sharing on, torch 2.15's agents keep
the first round's address when rank 0 moves).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import (
    LABEL_HOSTNAME,
    LABEL_JOB_NAME,
    LABEL_NODE_INDEX,
    LABEL_RENDEZVOUS_STORE,
    RENDEZVOUS_STORE_CONTAINER,
    EnvName,
    rendezvous_store_hostname,
)
from multinode.render.env import rendezvous_port, user_env
from multinode.render.node_exclusion import exclude_nodes
from multinode.render.names import common_labels, job_identity, owner_reference, service_name
from multinode.render.security import trainer_security_context
from multinode.render.tolerations import pod_tolerations

# torch's TCPStore server, as the c10d backend's clients expect it (multi_tenant), until SIGTERM; a server listens
# on every address whatever host it is given. Python, run with `python3 -c` in the trainer's image: torch there
# serves whatever protocol its agents speak.
STORE_PROGRAM = """\
import os, signal
from datetime import timedelta
from torch.distributed import TCPStore
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # the store holds nothing worth a clean shutdown
port = int(os.environ["MULTINODE_RENDEZVOUS_STORE_PORT"])
# A server only (is_master, no world size to wait for): torchrun's c10d backend connects to it as a client.
store = TCPStore("localhost", port, is_master=True, multi_tenant=True, wait_for_workers=False,
                 timeout=timedelta(seconds=60))
print(f"rendezvous store listening on port {store.port}", flush=True)
while True:
    signal.pause()
"""

# Small: one process serving a few keys per node. Memory is torch's import.
STORE_RESOURCES = {"requests": {"cpu": "50m", "memory": "384Mi"}, "limits": {"memory": "1Gi"}}


def store_pod_name(job_name: str, attempt: int) -> str:
    return f"{job_name}-rdzv-a{attempt}"


def render_store_pod(job: TrainingJob, attempt: int, image: str | None = None,
                     off_nodes: Sequence[str] = ()) -> dict[str, Any]:
    """The rendezvous store's pod of `attempt` (a new attempt starts a new rendezvous on a new store), required
    off `off_nodes` (the machines of the attempt's training pods; none: it may share one)."""
    identity = job_identity(job)
    spec, template = job.spec, job.spec.pod_template
    user_volumes = [v.model_dump(by_alias=True, exclude_none=True) for v in template.volumes or []]
    names = {v["name"] for v in user_volumes}
    mounts = [m.model_dump(by_alias=True, exclude_none=True) for m in template.volume_mounts or []
              if m.name in names]
    port = rendezvous_port(spec.network.rendezvous_port, attempt)
    env = [*user_env(job), {"name": EnvName.PYTHONUNBUFFERED, "value": "1"},
           {"name": EnvName.MULTINODE_RENDEZVOUS_STORE_PORT, "value": str(port)}]
    container = {
        "name": RENDEZVOUS_STORE_CONTAINER,
        "image": image or spec.image,
        "command": ["python3", "-c", STORE_PROGRAM],
        "env": env,
        "ports": [{"name": "rendezvous", "containerPort": port}],
        "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 2},
        "resources": {kind: dict(values) for kind, values in STORE_RESOURCES.items()},
        "securityContext": trainer_security_context(job),
        **({"volumeMounts": mounts} if mounts else {}),
        **({"imagePullPolicy": spec.image_pull_policy} if spec.image_pull_policy else {}),
    }
    # Off the training pods' machines: a node lost takes a rank, never the rendezvous. By node name, not by a
    # required pod anti-affinity, which would also keep a shed node's new pod off the store's machine for good.
    # The preferred term still weighs when the store may share (no other machine fits it).
    away = exclude_nodes(None, off_nodes) or {}
    away["podAntiAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100, "podAffinityTerm": {"topologyKey": LABEL_HOSTNAME, "labelSelector": {
            "matchLabels": {LABEL_JOB_NAME: identity.name},
            "matchExpressions": [{"key": LABEL_NODE_INDEX, "operator": "Exists"}]}}}]}
    pod_spec: dict[str, Any] = {
        "hostname": rendezvous_store_hostname(identity.name),
        "subdomain": service_name(identity.name),
        # A store restarted has lost the rendezvous: the attempt fails (RendezvousLost) and the next has its own.
        "restartPolicy": "Never",
        "containers": [container],
        "affinity": away,
        "tolerations": pod_tolerations(job),
        "automountServiceAccountToken": False,
        **({"volumes": user_volumes} if user_volumes else {}),
        **({"nodeSelector": dict(template.node_selector)} if template.node_selector else {}),
        **({"securityContext": template.security_context.model_dump(by_alias=True, exclude_none=True)}
           if template.security_context else {}),
        **({"priorityClassName": template.priority_class_name} if template.priority_class_name else {}),
        **({"imagePullSecrets": [s.model_dump(by_alias=True) for s in template.image_pull_secrets]}
           if template.image_pull_secrets else {}),
        **({"schedulerName": template.scheduler_name} if template.scheduler_name else {}),
    }
    # Its attempt in a label of its own: the node pods' one-per-machine term (their job and attempt labels) must
    # not count it, or a job as large as its pool would never fit beside its store.
    labels = {**common_labels(identity.name), LABEL_RENDEZVOUS_STORE: str(attempt)}
    metadata = {"name": store_pod_name(identity.name, attempt), "namespace": identity.namespace,
                "labels": labels, "ownerReferences": [owner_reference(job)]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
