"""`make demo` on real nodes: a real 2-node torchrun training, a checkpoint mirrored, one rank killed, the
gang restarted and resumed from the checkpoint, Succeeded.

The local cluster gets two real kubelet + containerd nodes beside its kwok nodes, and its own OCI registry.
The operator and trainer images and the chart are pushed there (`make push`); the operator is installed by
Helm from the OCI chart and runs in-cluster, its image pulled by the kubelet; examples/real/ is applied with
kubectl as a user would. Everything shown is real: the loss lines come from the two trainers' logs.
"""

from __future__ import annotations

import re
import sys
import time

from kubernetes import client
from localcluster import ClusterConfig, LocalCluster, NodePoolConfig, images, publish
from localcluster.faults import kill_worker_script
from localcluster.harness import realexample

from multinode import __version__
from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from multinode.api.constants import ANNOTATION_ATTEMPT, LABEL_ALLOW_HOST_PATH

from demo import CHART, REPO, helm, kubectl, say  # the kwok demo's helpers (same folder, on sys.path)

EXAMPLE = REPO / "examples" / "real"
JOB, NAMESPACE = "real-train", "demo"
KILL_WORKER = kill_worker_script("/app/train.py")


def wait(probe, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(1)
    raise SystemExit(f"demo: timed out after {timeout:.0f}s waiting for {what}")


def status(custom: client.CustomObjectsApi) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, JOB).get("status") or {}


def loss_lines(core: client.CoreV1Api, attempt: int, shown: dict[str, int]) -> int:
    """Print the loss lines of the attempt's trainers not shown yet; returns how many are new. The attempt's
    pods are those named for it, or, restarted in place (the default on these nodes), those its annotation
    names: the kubelet removed the earlier attempt's containers, so their logs are this attempt's."""
    new = 0
    for pod in core.list_namespaced_pod(NAMESPACE, label_selector=f"{LABEL_JOB_NAME}={JOB}").items:
        name = pod.metadata.name
        runs = name.endswith(f"-a{attempt}") or (pod.metadata.annotations or {}).get(ANNOTATION_ATTEMPT) == str(attempt)
        if not runs or pod.status.phase not in ("Running", "Succeeded", "Failed"):
            continue
        try:
            log = core.read_namespaced_pod_log(name, NAMESPACE)
        except client.ApiException:
            continue
        lines = [ln for ln in log.splitlines() if re.match(r"(step=|allreduce_sum=|resumed_from=|done )", ln)]
        for line in lines[shown.get(name, 0):]:
            print(f"  [{name}] {line}", flush=True)
        new += len(lines) - shown.get(name, 0)
        shown[name] = len(lines)
    return new


def main() -> int:
    started = time.monotonic()
    cluster = LocalCluster(ClusterConfig(name="default", nodes=NodePoolConfig(count=4), real_nodes=2))
    say("starting the local cluster: control plane, 4 kwok nodes and 2 real kubelet + containerd nodes")
    cluster.start()
    kc = str(cluster.kubeconfig)
    kubectl(kc, "get", "nodes", "-L", "type,nvidia.com/gpu.product")
    core, custom = client.CoreV1Api(cluster.api_client()), client.CustomObjectsApi(cluster.api_client())

    registry = cluster.registry
    say(f"make push: the operator and trainer images and the chart into the cluster's registry {registry}")
    pushed = publish.push_for_local_cluster(registry)
    for name in pushed.images:
        print(f"  {publish.image_reference(registry, name)}", flush=True)
    print(f"  {pushed.chart} --version {__version__}", flush=True)

    say("installing the operator with Helm from the OCI chart; the kubelet pulls its image from the registry")
    install_started = time.monotonic()
    helm(kc, "install", "mn", str(pushed.chart), "--version", __version__, "-n", "multinode-system",
         "--create-namespace", "--set", f"image.repository={publish.image_repository(registry, images.OPERATOR)}",
         "-f", str(CHART / "values-local.yaml"), "--wait", "--timeout", "180s")
    print(f"  helm install from the OCI chart to the operator Ready: {time.monotonic() - install_started:.1f}s",
          flush=True)
    kubectl(kc, "get", "pods", "-n", "multinode-system", "-o", "wide")

    say("applying examples/real/ (two shared volumes and a 2-node torchrun TrainingJob), as a user would")
    kubectl(kc, "create", "namespace", NAMESPACE)
    say(f"as the cluster's admin: namespace {NAMESPACE} may mount hostPath volumes (the example mounts torch from "
        "the host), which the chart's admission policy refuses unless a namespace is labelled for it")
    kubectl(kc, "label", "namespace", NAMESPACE, f"{LABEL_ALLOW_HOST_PATH}=true")
    placeholder = publish.image_reference(f"${{{realexample.REGISTRY_VARIABLE}}}", images.TRAINER)
    print(f"  (its image is {placeholder}, the registry filled in as envsubst would)", flush=True)
    manifests = realexample.write_manifests(registry, cluster.dir / "real-example")
    kubectl(kc, "apply", "-n", NAMESPACE, "-f", str(manifests))
    shown: dict[str, int] = {}
    wait(lambda: (loss_lines(core, 0, shown), len(shown) == 2 and all(shown.values()))[1], 300,
         "both ranks to train")
    kubectl(kc, "get", "tj", "-n", NAMESPACE)

    say("the mirror pod publishes complete DCP checkpoints from the shared cache")
    latest = wait(lambda: (loss_lines(core, 0, shown), (status(custom).get("checkpoints") or {}).get("latest"))[1],
                  180, "a mirrored checkpoint")
    print(f"  status.checkpoints.latest: {latest['name']} ({latest.get('path', '')})", flush=True)

    say(f"killing rank 1's training process (SIGKILL in {JOB}-1-a0)")
    kubectl(kc, "exec", "-n", NAMESPACE, f"{JOB}-1-a0", "--", "python3", "-c", KILL_WORKER)
    wait(lambda: status(custom).get("attempt") == 1, 180, "the gang restart")
    kubectl(kc, "get", "tj", "-n", NAMESPACE)
    history = status(custom)["restartHistory"][-1]
    print(f"  restart: attempt {history['attempt']} {history['reason']}: {history['message']}", flush=True)
    resumed = wait(lambda: status(custom).get("resumedFrom"), 120, "status.resumedFrom")
    say(f"attempt 1 resumes from {resumed}")
    shown = {}
    final = wait(lambda: (loss_lines(core, 1, shown), status(custom).get("phase") in ("Succeeded", "Failed")
                          and status(custom))[1], 600, "the job to finish")
    loss_lines(core, 1, shown)
    kubectl(kc, "get", "tj", "-n", NAMESPACE)
    say(f"{JOB}: {final['phase']} after {final.get('restarts', 0)} restart, resumed from {resumed}; "
        f"demo took {time.monotonic() - started:.0f}s")
    print(f"The cluster keeps running: export KUBECONFIG={kc} MULTINODE_REGISTRY={registry}  "
          "(stop it with `make cluster-down`)")
    return 0 if final["phase"] == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
