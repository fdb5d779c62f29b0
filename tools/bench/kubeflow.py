"""Kubeflow Training Operator v1 (PyTorchJob) as a benchmark peer, like JobSet in peers.py.

    tools/localcluster/build.sh kubeflow      # once (about 2 min with warm Go caches on 2 cores)
    PATH=$(.venv/bin/python -m localcluster bin-path):$PATH .venv/bin/python -P tools/bench/kubeflow.py --nodes 4

The second line is a self-check: a local cluster, the CRDs, the operator under its own cluster-admin
ServiceAccount, one N-node PyTorchJob; it prints how long each milestone took and stops everything.

How the operator (github.com/kubeflow/training-operator cmd/training-operator.v1, v1.8.1) runs here:

- A local process with `--enable-scheme=pytorchjob` only, leader election off (its default), metrics and
  health probes on loopback ports. It has no QPS/burst flags: controller-runtime's defaults apply (20 QPS,
  burst 30), with `--controller-threads` at its default of 1 unless a caller sets it.
- Unlike JobSet, its cert management cannot be turned off and the controllers only start once it is done:
  open-policy-agent/cert-controller fills Secret `training-operator-webhook-cert` in the namespace
  $MY_POD_NAMESPACE (default `kubeflow`) with a CA and a serving cert for DNS name
  `<--webhook-service-name>.<namespace>.svc` (no IP SANs), waits until `tls.crt` exists in the
  hard-coded directory /tmp/k8s-webhook-server/serving-certs (in a pod: the mounted Secret), then puts
  the CA into every webhook of ValidatingWebhookConfiguration `validator.training-operator.kubeflow.org`.
  So before the start we create the namespace, the empty Secret and that configuration; during the start
  we copy the Secret's keys into the directory, as the kubelet would.
- The apiserver reaches the webhook over loopback through a Service of type ExternalName (`localhost`):
  for a `clientConfig.service` reference the apiserver dials `<externalName>:<port>` and checks the
  certificate against `<service>.<namespace>.svc`, which is the name the rotator signs. A
  `clientConfig.url: https://127.0.0.1:<port>/...` cannot work: the certificate has no IP SAN.
- The webhook server listens on every interface (`--webhook-server-port` has no host part).
- Because the cert directory is fixed, only one operator per machine may run at a time.
"""

from __future__ import annotations

import argparse
import base64
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kubernetes import client, config as kube_config

REPO = Path(__file__).resolve().parents[2]
for p in (str(REPO / "tools" / "bench"),):
    if p not in sys.path:
        sys.path.insert(0, p)

from localcluster import binaries, processes
from peers import free_port, wait_http_ok

KUBEFLOW_GROUP, KUBEFLOW_VERSION, PYTORCHJOB_PLURAL = "kubeflow.org", "v1", "pytorchjobs"
# Labels the operator puts on every pod (and Service) of a job.
KUBEFLOW_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"  # "master" / "worker"
KUBEFLOW_REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
# Names fixed by the operator (pkg/cert/cert.go and main.go defaults).
OPERATOR_NS = "kubeflow"
WEBHOOK_SECRET = "training-operator-webhook-cert"
WEBHOOK_SERVICE = "training-operator"
WEBHOOK_CONFIG = "validator.training-operator.kubeflow.org"
PYTORCHJOB_WEBHOOK_PATH = "/validate-kubeflow-org-v1-pytorchjob"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
LOG_COPY = REPO / ".cache" / "bench" / "kubeflow-check-operator.log"  # the self-check's operator log


def training_operator_dir() -> Path:
    version = binaries.read_versions()["KUBEFLOW_TRAINING_OPERATOR_VERSION"]
    return binaries.cache_dir() / "bin" / f"kubeflow-training-operator-{version}"


def ensure_training_operator_built() -> Path:
    out = training_operator_dir()
    if not ((out / "manager").exists() and (out / "crds").is_dir()):
        subprocess.run([str(binaries.BUILD_SCRIPT), "kubeflow"], check=True)
    return out


def install_training_operator_crds(kubeconfig: str, kinds: tuple[str, ...] = ("pytorchjobs",)) -> None:
    """Server-side apply (each CRD is ~0.5 MB, too big for the client-side last-applied annotation)."""
    from localcluster.harness.kube import kubectl

    crds = ensure_training_operator_built() / "crds"
    for kind in kinds:
        kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f",
                str(crds / f"kubeflow.org_{kind}.yaml"))
    deadline = time.monotonic() + 60
    for kind in kinds:
        while kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
                      f"crd/{kind}.kubeflow.org", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {kind}.kubeflow.org not Established")
            time.sleep(0.5)


def _api(kubeconfig_or_client) -> client.ApiClient:
    if isinstance(kubeconfig_or_client, client.ApiClient):
        return kubeconfig_or_client
    return kube_config.new_client_from_config(config_file=str(kubeconfig_or_client))


def _create_or_replace(create, delete, body: dict) -> None:
    try:
        create(body)
    except client.ApiException as e:
        if e.status != 409:
            raise
        delete(body["metadata"]["name"])
        deadline = time.monotonic() + 30
        while True:
            try:
                create(body)
                return
            except client.ApiException as e2:
                if e2.status != 409 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def install_training_operator_webhook(kubeconfig_or_client, webhook_port: int) -> None:
    """Namespace, empty cert Secret, ExternalName Service → localhost, and the ValidatingWebhookConfiguration
    (PyTorchJob only) that the operator's cert rotator fills with its CA. Replaces leftovers of an earlier run."""
    api = _api(kubeconfig_or_client)
    core, adm = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": OPERATOR_NS}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    # A fresh Secret: the rotator generates a new CA and serving cert into it.
    _create_or_replace(lambda b: core.create_namespaced_secret(OPERATOR_NS, b),
                       lambda n: core.delete_namespaced_secret(n, OPERATOR_NS),
                       {"metadata": {"name": WEBHOOK_SECRET}, "type": "Opaque"})
    _create_or_replace(lambda b: core.create_namespaced_service(OPERATOR_NS, b),
                       lambda n: core.delete_namespaced_service(n, OPERATOR_NS),
                       {"metadata": {"name": WEBHOOK_SERVICE},
                        "spec": {"type": "ExternalName", "externalName": "localhost"}})
    _create_or_replace(adm.create_validating_webhook_configuration,
                       adm.delete_validating_webhook_configuration, {
        "metadata": {"name": WEBHOOK_CONFIG},
        "webhooks": [{
            "name": "validator.pytorchjob.training-operator.kubeflow.org",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"service": {"namespace": OPERATOR_NS, "name": WEBHOOK_SERVICE,
                                         "path": PYTORCHJOB_WEBHOOK_PATH, "port": webhook_port}},
            "rules": [{"apiGroups": [KUBEFLOW_GROUP], "apiVersions": [KUBEFLOW_VERSION],
                       "operations": ["CREATE", "UPDATE"], "resources": [PYTORCHJOB_PLURAL]}],
        }],
    })


def uninstall_training_operator_webhook(kubeconfig_or_client) -> None:
    """Without the operator, a left-over webhook (failurePolicy Fail) refuses every PyTorchJob write."""
    adm = client.AdmissionregistrationV1Api(_api(kubeconfig_or_client))
    try:
        adm.delete_validating_webhook_configuration(WEBHOOK_CONFIG)
    except client.ApiException as e:
        if e.status != 404:
            raise


class TrainingOperatorProcess:
    """The training operator (PyTorchJob controller + validating webhook) as a local process."""

    def __init__(self, kubeconfig: str, work_dir: Path, controller_threads: int | None = None):
        self.kubeconfig, self.dir, self.controller_threads = kubeconfig, work_dir, controller_threads
        self.health_port, self.metrics_port, self.webhook_port = free_port(), free_port(), free_port()
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "logs" / "kubeflow-training-operator.log"

    @property
    def marker(self) -> str:
        return f"127.0.0.1:{self.health_port}"

    def start(self, timeout: float = 90.0) -> None:
        bin_dir = ensure_training_operator_built()
        api = _api(self.kubeconfig)
        install_training_operator_webhook(api, self.webhook_port)
        # Stale files would pass the rotator's "mounted" check with a cert the new CA did not sign.
        for name in ("tls.crt", "tls.key", "ca.crt"):
            (CERT_DIR / name).unlink(missing_ok=True)
        args = [
            # The webhook server reads os.TempDir()/k8s-webhook-server/serving-certs, the rotator checks
            # /tmp/...: make them the same directory.
            "env", "TMPDIR=/tmp", f"MY_POD_NAMESPACE={OPERATOR_NS}",
            str(bin_dir / "manager"), f"--kubeconfig={self.kubeconfig}",
            "--enable-scheme=pytorchjob", "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address={self.marker}",
            f"--webhook-server-port={self.webhook_port}",
            f"--webhook-service-name={WEBHOOK_SERVICE}", f"--webhook-secret-name={WEBHOOK_SECRET}",
            "--zap-log-level=info",
        ]
        if self.controller_threads is not None:
            args.append(f"--controller-threads={self.controller_threads}")
        self.proc = processes.start(args, self.log, die_with_parent=True)
        core = client.CoreV1Api(api)
        deadline = time.monotonic() + timeout
        self._mount_certs(core, deadline)
        self._wait_ready(deadline)
        self._wait_webhook(api, deadline)

    def _check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"training operator exited; see {self.log}")

    def _mount_certs(self, core: client.CoreV1Api, deadline: float) -> None:
        """What the kubelet does for the operator's pod: the Secret's keys as files in the cert dir."""
        while True:
            self._check_alive()
            data = core.read_namespaced_secret(WEBHOOK_SECRET, OPERATOR_NS).data or {}
            if data.get("tls.crt") and data.get("tls.key"):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"training operator wrote no certificate; see {self.log}")
            time.sleep(0.1)
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("ca.crt", "tls.key", "tls.crt"):  # tls.crt last: its existence is the rotator's signal
            if name in data:
                tmp = CERT_DIR / f".{name}.tmp"
                tmp.write_bytes(base64.b64decode(data[name]))
                tmp.chmod(0o600)
                tmp.replace(CERT_DIR / name)

    def _wait_ready(self, deadline: float) -> None:
        """/readyz: certificates mounted, CA injected into the webhook configuration, webhook server up."""
        wait_http_ok(f"http://{self.marker}/readyz", self.proc, deadline, f"training operator (log: {self.log})")

    def _wait_webhook(self, api: client.ApiClient, deadline: float) -> None:
        """A dry-run create goes apiserver → webhook; its handler is registered just after /readyz turns OK."""
        custom = client.CustomObjectsApi(api)
        body = pytorchjob_manifest("webhook-probe", 2, 0)
        while True:
            self._check_alive()
            try:
                custom.create_namespaced_custom_object(KUBEFLOW_GROUP, KUBEFLOW_VERSION, OPERATOR_NS,
                                                       PYTORCHJOB_PLURAL, body, dry_run="All")
                return
            except client.ApiException as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"PyTorchJob webhook not answering: {e.status} {e.body}") from e
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            processes.stop(self.proc.pid, self.marker, grace_seconds=10)
            self.proc.wait(timeout=10)  # exited, not only its port closed (peers.JobSetProcess.stop)
        for name in ("tls.crt", "tls.key", "ca.crt"):
            (CERT_DIR / name).unlink(missing_ok=True)


def pytorchjob_manifest(name: str, num_nodes: int, gpus: int, image: str = "registry.example/train:1.0",
                        restart_policy: str = "OnFailure") -> dict:
    """One Master and `num_nodes - 1` Workers, `gpus` GPUs each. The operator applies its defaults itself
    (no mutating webhook), so none are set here. restart_policy: Kubeflow's examples use OnFailure (the
    kubelet restarts the container in place); Never/ExitCode make the operator handle failed pods."""
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}

    def replica(count: int) -> dict:
        return {"replicas": count, "restartPolicy": restart_policy, "template": {"spec": {
            # The operator finds the training container by this name (its default container name).
            "containers": [{"name": "pytorch", "image": image, "command": ["torchrun", "train.py"],
                            "resources": resources}],
        }}}

    specs = {"Master": replica(1)}
    if num_nodes > 1:
        specs["Worker"] = replica(num_nodes - 1)
    return {"apiVersion": f"{KUBEFLOW_GROUP}/{KUBEFLOW_VERSION}", "kind": "PyTorchJob",
            "metadata": {"name": name}, "spec": {"pytorchReplicaSpecs": specs}}


def pytorchjob_running(obj: dict) -> bool:
    """Condition Running True. The operator sets it once the Master pod runs (it does not wait for Workers)."""
    return any(c.get("type") == "Running" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def job_of_pod(pod: dict) -> str | None:
    return (pod["metadata"].get("labels") or {}).get(KUBEFLOW_JOB_NAME_LABEL)


# ---- self-check ----------------------------------------------------------------------------------

def main() -> int:
    from localcluster import ClusterConfig, LocalCluster, NodePoolConfig
    from peers import Clock, RawWatch, identity, rss_peak_mb
    from localcluster.harness.kube import new_namespace

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per pod (8 = one pod per 8-GPU node)")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    t_start = time.monotonic()
    ensure_training_operator_built()
    cluster = LocalCluster(ClusterConfig(
        name=f"kubeflow-{uuid.uuid4().hex[:6]}", die_with_parent=True,
        nodes=NodePoolConfig(count=args.nodes, gpus_per_node=8, rdma_per_node=0)))
    operator: TrainingOperatorProcess | None = None
    watches: list[RawWatch] = []
    try:
        cluster.start()
        print(f"cluster up                    {time.monotonic() - t_start:6.2f}s", flush=True)
        kc = str(cluster.kubeconfig)
        api = cluster.api_client()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        t = time.monotonic()
        install_training_operator_crds(kc)
        print(f"PyTorchJob CRD installed      {time.monotonic() - t:6.2f}s", flush=True)
        op_kc, op_user = identity(cluster, core, client.RbacAuthorizationV1Api(api), "kubeflow-training-operator")
        operator = TrainingOperatorProcess(op_kc, cluster.dir)
        t = time.monotonic()
        operator.start()
        print(f"operator ready (as {op_user}) {time.monotonic() - t:6.2f}s", flush=True)

        ns = new_namespace(core, prefix="kubeflow")
        # The webhook is in the loop: an unknown replica type is refused by it, not by the CRD schema.
        bad = pytorchjob_manifest("bad", 2, 0)
        bad["spec"]["pytorchReplicaSpecs"]["Launcher"] = bad["spec"]["pytorchReplicaSpecs"].pop("Worker")
        try:
            custom.create_namespaced_custom_object(KUBEFLOW_GROUP, KUBEFLOW_VERSION, ns, PYTORCHJOB_PLURAL, bad)
            print("FAILED: the webhook let an invalid PyTorchJob through", file=sys.stderr)
            return 1
        except client.ApiException as e:
            if "denied the request" not in (e.body or ""):
                raise
            print(f"webhook refuses an invalid PyTorchJob: HTTP {e.status}", flush=True)
        clock = Clock()
        watches = [
            RawWatch(api, f"/api/v1/namespaces/{ns}/pods",
                     lambda k, o, now: clock.pod_event(k, o, now, job_of_pod)).start(),
            RawWatch(api, f"/apis/{KUBEFLOW_GROUP}/{KUBEFLOW_VERSION}/namespaces/{ns}/{PYTORCHJOB_PLURAL}",
                     lambda k, o, now: clock.job_event(o["metadata"]["name"], pytorchjob_running(o), now)).start(),
        ]
        time.sleep(0.5)  # let the watches open before the create
        name, n = "check", args.nodes
        t0 = time.monotonic()
        custom.create_namespaced_custom_object(KUBEFLOW_GROUP, KUBEFLOW_VERSION, ns, PYTORCHJOB_PLURAL,
                                               pytorchjob_manifest(name, n, args.gpus))

        def milestones():
            pods = clock.of(name)
            if len(pods) < n:
                return None
            out = {}
            for m in ("created", "scheduled", "running"):
                times = [p.get(m) for p in pods]
                if any(x is None for x in times):
                    return None
                out[m] = max(times) - t0
            st = clock.status.get(name, {}).get("running")
            if st is None:
                return None
            out["status"] = st - t0
            return out

        result = clock.wait(milestones, args.timeout, f"PyTorchJob {name} with {n} Running pods")
        print(f"{n}-node PyTorchJob: " + " ".join(f"{m} {v:.2f}s" for m, v in result.items()), flush=True)
        pods = core.list_namespaced_pod(ns, label_selector=f"{KUBEFLOW_JOB_NAME_LABEL}={name}").items
        running = [p for p in pods if p.status.phase == "Running"]
        roles = sorted(f"{p.metadata.labels.get(KUBEFLOW_REPLICA_TYPE_LABEL)}-"
                       f"{p.metadata.labels.get(KUBEFLOW_REPLICA_INDEX_LABEL)}"
                       for p in running)
        obj = custom.get_namespaced_custom_object(KUBEFLOW_GROUP, KUBEFLOW_VERSION, ns, PYTORCHJOB_PLURAL, name)
        conds = [(c["type"], c["status"]) for c in obj["status"].get("conditions", [])]
        print(f"  pods Running: {len(running)}/{n} {roles}")
        print(f"  conditions: {conds}")
        print(f"  operator peak RSS {rss_peak_mb(operator.proc.pid):.0f} MB")
        if len(running) != n or not pytorchjob_running(obj):
            print("FAILED", file=sys.stderr)
            return 1
        t = time.monotonic()
        custom.delete_namespaced_custom_object(KUBEFLOW_GROUP, KUBEFLOW_VERSION, ns, PYTORCHJOB_PLURAL, name,
                                               body={"propagationPolicy": "Background"})
        clock.wait(lambda: clock.live(name) == 0, args.timeout, "pods deleted")
        print(f"  job deleted, pods gone in {time.monotonic() - t:.2f}s")
        print(f"OK (operator log: {LOG_COPY})")
        return 0
    finally:
        for w in watches:
            w.stop()
        if operator is not None:
            operator.stop()
            if operator.log.exists():
                LOG_COPY.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(operator.log, LOG_COPY)
        cluster.stop()
        shutil.rmtree(cluster.dir, ignore_errors=True)
        print(f"stopped; total {time.monotonic() - t_start:.1f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
