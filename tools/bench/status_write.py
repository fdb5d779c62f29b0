"""Diagnostic: kube-apiserver's CPU for one TrainingJob status write, the committed CRD beside variants of it.

    .venv/bin/python -P tools/bench/status_write.py [--writes 300] [--rounds 2] [--nodes 8]

A cluster of its own; nothing is scheduled. Per CRD variant, alternating, `--rounds` times: the variant
applied, a new TrainingJob of `--nodes` nodes created, and its status patched `--writes` times the way the
operator writes it (a merge patch of the whole status, one condition's message changed each time); the
status is the planner's for that job with every pod Running (7 conditions, a row per node, goodput).
kube-apiserver's CPU seconds from /proc over the writes, divided by them. Variants:
  committed  crds/trainingjobs.multinode.dev.yaml as the models render it
  keyed      conditions, nodeStatuses and excludedNodes as keyed lists (listType map), as before 2026-11-30
  no-cel     no x-kubernetes-validations rule anywhere: what the CRD's CEL rules cost a status write
Writes .cache/bench/status_write.json. Not part of `make bench`: the load benchmark's throughput is the
figure; this says what one of its requests costs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubernetes import client
from localcluster import ClusterConfig, LocalCluster, NodePoolConfig

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import cluster_pids, cpu_seconds, machine, wait_established
from localcluster.harness.kube import kubectl, new_namespace
from multinode.api import GROUP, PLURAL, VERSION, TrainingJob
from multinode.api.crd import render_crd
from multinode.controller.status_patch import dump_status
from multinode.reconcile.observed import Observed
from multinode.reconcile.plan import plan
from multinode.render import RenderSettings
from multinode.testing import observed_pod, training_job

OUT = REPO / ".cache" / "bench" / "status_write.json"
KEYED = {"conditions": "type", "nodeStatuses": "index", "excludedNodes": "node"}
VARIANTS = ("committed", "keyed", "no-cel")


def variant(name: str) -> dict[str, Any]:
    crd = render_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    if name == "keyed":
        status = schema["properties"]["status"]["properties"]
        for field, key in KEYED.items():
            status[field].update({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]})
    elif name == "no-cel":
        def strip(node: Any) -> None:
            if isinstance(node, dict):
                node.pop("x-kubernetes-validations", None)
                for value in node.values():
                    strip(value)
            elif isinstance(node, list):
                for value in node:
                    strip(value)
        strip(schema)
    return crd


def running_status(body: dict[str, Any], nodes: int) -> dict[str, Any]:
    """The status the planner writes for this job once every pod runs (its first pass, then the Running one)."""
    job = TrainingJob.model_validate(body)
    now = datetime.now(timezone.utc)
    first = plan(job, Observed(), previous=None, now=now, settings=RenderSettings()).status
    pods = tuple(observed_pod(i, node=f"gpu-node-{i}") for i in range(nodes))
    return dump_status(plan(job, Observed(pods=pods, service_exists=True), previous=first, now=now,
                            settings=RenderSettings()).status)


def measure(api: client.ApiClient, apiserver_pid: int, namespace: str, nodes: int, writes: int) -> float:
    """Milliseconds of kube-apiserver CPU per status write, over `writes` writes of a new job's status."""
    custom = client.CustomObjectsApi(api)
    body = training_job(f"s-{uuid.uuid4().hex[:8]}", nodes, gpus=1)
    body["metadata"]["namespace"] = namespace
    created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    body["metadata"]["uid"] = created["metadata"]["uid"]
    status = running_status(body, nodes)

    def write(i: int) -> None:
        status["conditions"][0]["message"] = f"write {i}"
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, body["metadata"]["name"],
                                                     {"status": status})

    for i in range(20):  # the CRD's new handler and the job's first writes warm up first
        write(i)
    before = cpu_seconds(apiserver_pid)
    for i in range(writes):
        write(i)
    return 1000 * (cpu_seconds(apiserver_pid) - before) / writes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cluster = LocalCluster(ClusterConfig(name=f"status-write-{uuid.uuid4().hex[:6]}", die_with_parent=True,
                                         nodes=NodePoolConfig(count=1, gpus_per_node=8, rdma_per_node=0)))
    ms: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        cluster.start()
        api = cluster.api_client()
        apiserver_pid = cluster_pids(cluster)["kube-apiserver"]
        namespace = new_namespace(client.CoreV1Api(api), prefix="status-write")
        for r in range(args.rounds):
            for name in VARIANTS:
                kubectl(str(cluster.kubeconfig), "apply", "--server-side", "--force-conflicts", "-f", "-",
                        input=json.dumps(variant(name)))
                wait_established(str(cluster.kubeconfig), "trainingjobs.multinode.dev")
                ms[name].append(measure(api, apiserver_pid, namespace, args.nodes, args.writes))
                print(f"  round {r} {name:>9}: {ms[name][-1]:.2f} ms of kube-apiserver CPU per status write",
                      flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(cluster.dir, ignore_errors=True)
    med = {name: statistics.median(v) for name, v in ms.items()}
    print("median ms per status write: " + ", ".join(f"{name} {v:.2f}" for name, v in med.items()))
    from localcluster.binaries import read_versions

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine(), "versions": read_versions(), "nodes": args.nodes,
                                    "writes": args.writes, "ms_per_write": ms, "median_ms": med}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
