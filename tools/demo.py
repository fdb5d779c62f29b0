"""`make demo`: the local cluster, the operator installed with Helm, and a job applied with kubectl.

By default the demo runs on real nodes (tools/demo_real.py: real torchrun training, a checkpoint, a killed
rank, resume). Where real nodes cannot start (not root, no cgroups) or with MULTINODE_DEMO=kwok, it runs
this kwok demo with examples/job.yaml instead, and says why.

Shows the job's phases as they change until it Succeeds. There are no GPUs, containers or images here:
kwok plays the kubelet, the chart's Deployment is installed with 0 replicas (no image can be built), and
the operator runs as a local process with the chart's own ServiceAccount token, so the chart's RBAC is
what it has. This script stands in for the training processes finishing (it asks kwok to end them once
the job runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from kubernetes import client, watch
from localcluster import ClusterConfig, LocalCluster, prepare

from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "job.yaml"
CHART = REPO / "charts" / "multinode-operator"
RELEASE, OPERATOR_NS = "multinode-operator", "multinode-system"
CRD = "trainingjobs.multinode.dev"
NAMESPACE = "default"
TIMEOUT_SECONDS = 120


def say(text: str) -> None:
    print(f"\033[1m==> {text}\033[0m", flush=True)


def kubectl(kubeconfig: str, *args: str, show: bool = True) -> str:
    if show:
        print(f"$ kubectl {' '.join(args)}", flush=True)
    out = subprocess.run(["kubectl", *args], env=dict(os.environ, KUBECONFIG=kubeconfig), check=True,
                         capture_output=True, text=True).stdout
    if show:
        print(out, end="", flush=True)
    return out


def helm(kubeconfig: str, *args: str) -> str:
    print(f"$ helm {' '.join(args)}", flush=True)
    out = subprocess.run(["helm", *args, "--kubeconfig", kubeconfig], check=True, capture_output=True, text=True)
    return out.stdout


def install_chart(kc: str) -> str:
    """helm install (or upgrade) the chart; returns the operator's ServiceAccount name."""
    crd = subprocess.run(["kubectl", "get", "crd", CRD, "-o", "jsonpath={.metadata.annotations}"],
                         env=dict(os.environ, KUBECONFIG=kc), capture_output=True, text=True, check=False)
    if crd.returncode == 0 and RELEASE not in crd.stdout:
        # Applied earlier with kubectl (tests do): hand it to the release, as docs/install.md says.
        kubectl(kc, "label", "crd", CRD, "--overwrite", "app.kubernetes.io/managed-by=Helm", show=False)
        kubectl(kc, "annotate", "crd", CRD, "--overwrite", f"meta.helm.sh/release-name={RELEASE}",
                f"meta.helm.sh/release-namespace={OPERATOR_NS}", show=False)
    out = helm(kc, "upgrade", "--install", RELEASE, str(CHART), "--namespace", OPERATOR_NS, "--create-namespace",
               "--set", "replicaCount=0", "--wait")
    print("\n".join(out.splitlines()[:6]))
    kubectl(kc, "wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")
    return kubectl(kc, "get", "serviceaccount", "-n", OPERATOR_NS, "-l", f"app.kubernetes.io/instance={RELEASE}",
                   "-o", "jsonpath={.items[0].metadata.name}", show=False)


def why_not_real() -> str | None:
    """Why real nodes cannot run here, or None when they can."""
    if os.environ.get("MULTINODE_DEMO") == "kwok":
        return "MULTINODE_DEMO=kwok"
    if os.geteuid() != 0:
        return "not root (a kubelet, containerd and addresses on lo need root)"
    if not any(line.split()[2] in ("cgroup", "cgroup2") for line in Path("/proc/self/mounts").read_text().splitlines()):
        return "no cgroup hierarchy mounted"
    return None


def main() -> int:
    reason = why_not_real()
    say("building what the cluster needs, side by side (cached: seconds; cold: about 15 minutes on 2 cores)")
    if prepare.prepare(images=reason is None, peers=False):
        return 1
    if reason is None:
        sys.path.append(str(Path(__file__).resolve().parent))  # appended: never shadows an installed package
        import demo_real

        return demo_real.main()
    say(f"real nodes cannot start here ({reason}): running the kwok demo, whose pods run no process")
    started = time.monotonic()
    cluster = LocalCluster(ClusterConfig(name="default"))
    if cluster.is_running():
        say("local cluster already running")
    else:
        say("starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
        cluster.start()
    kc = str(cluster.kubeconfig)
    kubectl(kc, "get", "nodes", "-L", "nvidia.com/gpu.product,network.topology.nvidia.com/block")

    say("installing the operator with Helm (the Deployment with 0 replicas: no image can be built here)")
    service_account = install_chart(kc)

    job_name = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]
    kubectl(kc, "delete", "trainingjob", job_name, "--ignore-not-found", "--wait=true", show=False)

    log_path = cluster.dir / "logs" / "operator-demo.log"
    say(f"running the operator here as the chart's ServiceAccount {OPERATOR_NS}/{service_account} (log: {log_path})")
    token = kubectl(kc, "create", "token", service_account, "-n", OPERATOR_NS, "--duration=1h", show=False).strip()
    operator_kc = str(cluster.kubeconfig_for_token(token, cluster.dir / "operator-demo.kubeconfig"))
    with open(log_path, "ab") as log:
        operator = subprocess.Popen([sys.executable, "-m", "multinode.cli.main", "operator", "--metrics-port", "0"],
                                    env=dict(os.environ, KUBECONFIG=operator_kc), stdout=log, stderr=subprocess.STDOUT)
    try:
        say("applying the example job, as a user would")
        kubectl(kc, "apply", "-f", str(EXAMPLE))
        final = follow(cluster.api_client(), job_name)
    finally:
        operator.terminate()
        operator.wait(timeout=30)

    say("the result")
    kubectl(kc, "get", "trainingjob", job_name)
    kubectl(kc, "get", "pods", "-l", f"{LABEL_JOB_NAME}={job_name}", "-o", "wide")
    say("the env contract of node 1 (docs/env.md has all of it)")
    # The attempt's shared variables come from its ConfigMap (envFrom), the node's own from the pod.
    pod = yaml.safe_load(kubectl(kc, "get", "pod", f"{job_name}-1-a0", "-o", "json", show=False))
    trainer = pod["spec"]["containers"][0]
    env: dict[str, str] = {}
    for source in trainer.get("envFrom", []):
        name = source["configMapRef"]["name"]
        env.update(yaml.safe_load(kubectl(kc, "get", "configmap", name, "-o", "json", show=False)).get("data") or {})
    env.update({e["name"]: e.get("value", "") for e in trainer.get("env", []) if "value" in e})
    shown = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "NPROC_PER_NODE", "WORLD_SIZE", "BT_", "NCCL_")
    print("".join(f"  {k}={v}\n" for k, v in env.items() if k.startswith(shown)), end="")
    status = final["status"]
    say(f"{job_name}: {status['phase']} - {status['numNodes']} nodes, "
        f"{next(c['message'] for c in status['conditions'] if c['type'] == status['phase'])}; "
        f"demo took {time.monotonic() - started:.0f}s")
    print(f"The cluster keeps running: export KUBECONFIG={kc}  (stop it with `make cluster-down`)")
    return 0 if status["phase"] == "Succeeded" else 1


def follow(api: client.ApiClient, name: str) -> dict:
    """Print each phase change (from a watch: none is missed); once all nodes run, let training finish."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    last, finishing = None, False
    stream = watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, NAMESPACE, PLURAL,
                                  field_selector=f"metadata.name={name}", timeout_seconds=TIMEOUT_SECONDS)
    for event in stream:
        job = event["object"]
        status = job.get("status") or {}
        phase = status.get("phase")
        if phase and phase != last:
            reason = next((c["message"] for c in status.get("conditions", []) if c["type"] == "Running"), "")
            print(f"  phase: {phase:<10} ready {status.get('ready', '-'):<5} {reason}", flush=True)
            last = phase
        if phase in ("Succeeded", "Failed"):
            return job
        if phase == "Running" and not finishing:
            say("all nodes running; simulating the training processes exiting 0 (kwok ends the containers)")
            for pod in core.list_namespaced_pod(NAMESPACE, label_selector=f"{LABEL_JOB_NAME}={name}").items:
                core.patch_namespaced_pod(pod.metadata.name, NAMESPACE, {"metadata": {"annotations": {
                    "localcluster.multinode.dev/finish-after": "2s"}}})
            finishing = True
    raise SystemExit(f"{name} did not finish within {TIMEOUT_SECONDS}s")


if __name__ == "__main__":
    sys.exit(main())
