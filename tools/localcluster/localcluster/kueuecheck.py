"""A TrainingJob queued through a real Kueue controller manager (built by `build.sh kueue`), on a cluster of its
own: what Kueue does and what it leaves to an integration the operator does not have.

    flock /tmp/multinode-cluster.lock python -m localcluster.kueuecheck

Kueue runs out of cluster with its own CRDs, no webhook configurations (its webhook server listens on a
self-signed certificate nobody calls), `TrainingJob.v1alpha1.multinode.dev` as an external framework, and a
ClusterQueue with 16 GPUs. The steps print what they saw:

1. a TrainingJob created suspended with `kueue.x-k8s.io/queue-name` stays Suspended with no pod;
2. whether Kueue made a Workload for it (for an external framework it does not: the job's own controller
   must, which is the adapter multinode lacks);
3. a Workload made by hand as that adapter would (owned by the job, one podSet of numNodes pods): Kueue
   admits it against the quota;
4. the job unsuspended as the adapter would on admission: it runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from localcluster import ClusterConfig
from localcluster.binaries import bin_path_dirs, cache_dir, read_versions
from localcluster.harness.clusters import own_cluster
from localcluster.harness.kube import kubectl
from localcluster.harness.operator import CRD_FILE, OperatorProcess, _free_port
from localcluster.harness.waiting import wait_for

NS = "t-kueue"
JOB = "queued"


def _kueue_dir() -> Path:
    folder = cache_dir() / "bin" / f"kueue-{read_versions()['KUEUE_VERSION']}"
    if not (folder / "manager").exists():
        raise SystemExit(f"{folder}/manager missing: run tools/localcluster/build.sh kueue")
    return folder


def _apply(kc: str, obj: dict) -> None:
    kubectl(kc, "apply", "--server-side", "-f", "-", input=yaml.safe_dump(obj))


def _get(kc: str, *args: str) -> dict:
    return json.loads(kubectl(kc, "get", *args, "-o", "json").stdout)


def _config(work: Path) -> Path:
    certs = work / "certs"
    certs.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kueue",
                    "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt")], check=True, capture_output=True)
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{_free_port()}"},
        "metrics": {"bindAddress": f"127.0.0.1:{_free_port()}"},
        "webhook": {"port": _free_port(), "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"], "externalFrameworks": ["TrainingJob.v1alpha1.multinode.dev"]},
    }
    # Without its internal cert management Kueue v0.17 reads the metrics server's certificate from a fixed
    # path (cmd/kueue/main.go: /etc/kueue/metrics/certs) and exits when it is missing (met on the first run).
    metrics = Path("/etc/kueue/metrics/certs")
    if not (metrics / "tls.crt").exists():
        metrics.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            (metrics / name).write_bytes((certs / name).read_bytes())
    path = work / "kueue.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def main() -> int:
    kueue = _kueue_dir()
    os.environ["PATH"] = os.pathsep.join([*map(str, bin_path_dirs()), os.environ.get("PATH", "")])
    with tempfile.TemporaryDirectory() as tmp, own_cluster(ClusterConfig(name=f"kueue-{os.getpid()}",
                                                                          die_with_parent=True)) as cluster:
        work, kc = Path(tmp), str(cluster.kubeconfig)
        kubectl(kc, "apply", "--server-side", "-f", str(CRD_FILE), "-f", str(kueue / "crds"))
        kubectl(kc, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        for ns in ("kueue-system", NS):
            kubectl(kc, "create", "namespace", ns)
        log = open(work / "kueue.log", "wb")  # noqa: SIM115 - closed with the process below
        manager = subprocess.Popen([str(kueue / "manager"), f"--config={_config(work)}", f"--kubeconfig={kc}",
                                    f"--visibility-server-port={_free_port()}"],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        operator = OperatorProcess(kc, [NS], work / "operator.log")
        try:
            return _steps(kc, manager, operator, work)
        finally:
            operator.stop()
            manager.terminate()
            manager.wait(timeout=30)
            log.close()
            print("--- kueue log (tail) ---")
            print("\n".join((work / "kueue.log").read_text(errors="replace").splitlines()[-25:]))


def _steps(kc: str, manager: subprocess.Popen, operator: OperatorProcess, work: Path) -> int:
    _apply(kc, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gpu"}})
    _apply(kc, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
                "spec": {"namespaceSelector": {}, "resourceGroups": [{
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}]}]}]}})
    _apply(kc, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": NS}, "spec": {"clusterQueue": "cq"}})
    wait_for(lambda: manager.poll() is None and any(
        c["type"] == "Active" and c["status"] == "True"
        for c in _get(kc, "clusterqueue", "cq").get("status", {}).get("conditions", [])),
        timeout=90, what=f"Kueue running and ClusterQueue cq Active (log {work / 'kueue.log'})")
    print("1. Kueue", read_versions()["KUEUE_VERSION"], "runs; ClusterQueue cq (16 GPUs) Active")
    operator.start()
    job = {"apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": JOB, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
           "spec": {"numNodes": 2, "image": "busybox", "command": ["sleep", "1"], "suspend": True,
                    "resourcesPerNode": {"gpus": 8}}}
    _apply(kc, job)
    tj = wait_for(lambda: (j := _get(kc, "tj", "-n", NS, JOB)).get("status", {}).get("phase") == "Suspended" and j,
                  timeout=30, what="the job Suspended")
    pods = _get(kc, "pods", "-n", NS)["items"]
    print(f"2. created suspended with the queue label: phase {tj['status']['phase']}, {len(pods)} pods")
    workloads = _get(kc, "workloads", "-n", NS)["items"]
    print(f"3. Workloads Kueue made for the TrainingJob: {len(workloads)} (an external framework's controller "
          "makes its own Workload; Kueue does not)")
    uid = tj["metadata"]["uid"]
    _apply(kc, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": f"trainingjob-{JOB}", "namespace": NS, "ownerReferences": [{
                    "apiVersion": "multinode.dev/v1alpha1", "kind": "TrainingJob", "name": JOB, "uid": uid,
                    "controller": True, "blockOwnerDeletion": True}]},
                "spec": {"queueName": "lq", "podSets": [{"name": "nodes", "count": 2, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "trainer", "image": "busybox",
                                                              "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}]}})
    started = time.monotonic()
    admitted = wait_for(lambda: (w := _get(kc, "workload", "-n", NS, f"trainingjob-{JOB}")).get("status", {}).get(
        "admission") and w, timeout=60, what="the Workload admitted")
    phase = _get(kc, "tj", "-n", NS, JOB)["status"]["phase"]
    print(f"4. a Workload made by hand as an adapter would: admitted in {time.monotonic() - started:.2f}s to "
          f"{admitted['status']['admission']['clusterQueue']}; the job still {phase}")
    kubectl(kc, "patch", "tj", "-n", NS, JOB, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    started = time.monotonic()
    wait_for(lambda: _get(kc, "tj", "-n", NS, JOB).get("status", {}).get("phase") in ("Running", "Succeeded"),
             timeout=60, what="the job running once unsuspended")
    print(f"5. unsuspended as the adapter would on admission: Running in {time.monotonic() - started:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
