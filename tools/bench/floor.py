"""Benchmark: the control plane's floor. How fast does this apiserver accept N pods from a bare client?

    .venv/bin/python -P tools/bench/floor.py [--nodes 1000] [--runs 3] [--concurrency 32]

No operator and no peer: this process creates N pods itself, `--concurrency` at a time, through the
operator's own write path (`multinode.controller.kube.KubeApi`: plain JSON, pooled connections), and
times the last 201. Two pod shapes, alternating:
  multinode  the pods the operator renders for an N-node TrainingJob (env contract, preflight init
             container), without the owner reference (there is no TrainingJob to own them)
  jobset     the pods JobSet's Job controller creates for the same job (its labels, annotations and
             JOB_COMPLETION_INDEX; same GPU limit), with what a JobSet user writes into the pod template
             for the same guarantees: one pod per node (a required pod anti-affinity on the hostname, by
             the JobSet's name; JobSet's exclusive-topology annotation places whole Jobs, not pods) and
             the trainer's defaults multinode sets for Pod Security (no privilege escalation, no
             capabilities, no ServiceAccount token)
This process's CPU over the creates, per pod, is what the operator's write path costs it for one pod create.
The scheduler and kwok work on them as in the real runs. Comparing with tools/bench/startup.py says how
much of a start is the control plane's (the floor for that pod shape) and how much the controller's.
Writes .cache/bench/floor.json. `make bench` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path

from kubernetes import client
from localcluster import ClusterConfig, LocalCluster, NodePoolConfig

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "bench"))
from peers import BENCH_NODE_MONITOR_GRACE, machine
from multinode.testing import training_job
from localcluster.harness.kube import new_namespace

from multinode.api import TrainingJob
from multinode.controller.kube import KubeApi
from multinode.render import render_node_pod

OUT = REPO / ".cache" / "bench" / "floor.json"
SHAPES = ("multinode", "jobset")


def multinode_pods(name: str, namespace: str, n: int, gpus: int) -> list[dict]:
    body = training_job(name, n, gpus=gpus)
    body["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), generation=1)
    job = TrainingJob.model_validate(body)
    pods = [render_node_pod(job, i, 0) for i in range(n)]
    for pod in pods:
        del pod["metadata"]["ownerReferences"]
    return pods


def jobset_pods(name: str, namespace: str, n: int, gpus: int) -> list[dict]:
    """What kube-controller-manager's Job controller sends for one JobSet replicated Job of n pods."""
    job, uid, js_uid = f"{name}-node-0", str(uuid.uuid4()), str(uuid.uuid4())
    jobset = {f"jobset.sigs.k8s.io/{k}": v for k, v in {
        "global-replicas": "1", "group-name": "default", "group-replicas": "1", "job-global-index": "0",
        "job-group-index": "0", "job-index": "0", "job-key": uuid.uuid4().hex + "abcdefgh",
        "jobset-name": name, "jobset-uid": js_uid, "replicatedjob-name": "node", "replicatedjob-replicas": "1",
        "restart-attempt": "0"}.items()}
    pods = []
    for i in range(n):
        index = {"batch.kubernetes.io/job-completion-index": str(i)}
        pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": f"{job}-{i}-{uuid.uuid4().hex[:5]}", "namespace": namespace,
                "labels": {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": job,
                           "controller-uid": uid, "job-name": job, **index, **jobset},
                "annotations": {**index, **jobset},
            },
            "spec": {
                "hostname": f"{job}-{i}", "subdomain": name, "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": name}},
                    "topologyKey": "kubernetes.io/hostname"}]}},
                "containers": [{
                    "name": "trainer", "image": "registry.example/train:1.0", "command": ["torchrun", "train.py"],
                    "env": [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                        "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}}],
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }],
            },
        })
    return pods


async def create_all(kube: KubeApi, namespace: str, pods: list[dict]) -> float:
    t0 = time.monotonic()
    await asyncio.gather(*(kube.create(namespace, pod) for pod in pods))
    return time.monotonic() - t0


def wait_gone(core: client.CoreV1Api, namespace: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while json.loads(core.list_namespaced_pod(namespace, limit=1, _preload_content=False).data)["items"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods of {namespace} still there after {timeout}s")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32, help="the operator's default api concurrency")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cluster = LocalCluster(ClusterConfig(
        name=f"bench-{uuid.uuid4().hex[:6]}", die_with_parent=True, ready_timeout_seconds=max(120.0, args.nodes * 0.3),
        node_monitor_grace_period=BENCH_NODE_MONITOR_GRACE,
        nodes=NodePoolConfig(count=args.nodes, gpus_per_node=args.gpus, rdma_per_node=0)))
    seconds: dict[str, list[float]] = {s: [] for s in SHAPES}
    pod_bytes: dict[str, int] = {}
    client_cpu: dict[str, list[float]] = {s: [] for s in SHAPES}
    try:
        cluster.start()
        api = cluster.api_client()
        core = client.CoreV1Api(api)
        namespace = new_namespace(core, prefix="floor")

        async def run(shape: str, i: int) -> tuple[float, float]:
            """Seconds for the creates, and this process's CPU milliseconds per pod over them (every thread:
            what the operator's write path costs its process for one pod create)."""
            kube = KubeApi(client.ApiClient(api.configuration), args.concurrency, timeout=60)
            try:
                make = multinode_pods if shape == "multinode" else jobset_pods
                pods = make(f"f{i}", namespace, args.nodes, args.gpus)
                pod_bytes[shape] = len(json.dumps(pods[0]))
                cpu0 = time.process_time()
                took = await create_all(kube, namespace, pods)
                return took, 1000 * (time.process_time() - cpu0) / len(pods)
            finally:
                await kube.close()

        for i in range(args.runs):
            for shape in (SHAPES if i % 2 == 0 else SHAPES[::-1]):
                s, cpu_ms = asyncio.run(run(shape, i))
                seconds[shape].append(s)
                client_cpu[shape].append(cpu_ms)
                print(f"  run {i} {shape:>9}: {args.nodes} pods created in {s:.2f}s ({args.nodes / s:.0f}/s); "
                      f"client CPU {cpu_ms:.3f} ms per pod", flush=True)
                core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
                wait_gone(core, namespace, args.timeout)
    finally:
        cluster.stop()
        shutil.rmtree(cluster.dir, ignore_errors=True)
    med = {s: statistics.median(v) for s, v in seconds.items()}
    print(f"\nfloor, {args.nodes} pods from a bare client ({args.concurrency} at a time), median of {args.runs}: "
          + ", ".join(f"{s} {med[s]:.2f}s" for s in SHAPES))
    from localcluster.binaries import read_versions

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine(), "versions": read_versions(), "nodes": args.nodes,
                                    "concurrency": args.concurrency, "runs_s": seconds, "median_s": med,
                                    "create_body_bytes": pod_bytes, "client_cpu_ms_per_pod": client_cpu,
                                    "median_client_cpu_ms_per_pod": {shape: statistics.median(v)
                                                                     for shape, v in client_cpu.items()}},
                                   indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
