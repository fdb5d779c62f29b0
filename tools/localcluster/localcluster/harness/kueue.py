"""A real Kueue controller manager (sigs.k8s.io/kueue, `build.sh kueue`) as a local process, for the tests of
the operator's Kueue integration.

How it runs without writing anything outside its work dir:

- Kueue v0.17 reads its metrics certificate from the fixed path /etc/kueue/metrics/certs unless its internal
  cert management is on (cmd/kueue/main.go). So it is on: Kueue's cert rotator makes a CA and a serving
  certificate and keeps them in the Secret `kueue-webhook-server-cert` of `kueue-system` (created empty here;
  the rotator only updates it). In a cluster the kubelet projects that Secret into `webhook.certDir`, where
  Kueue waits for `tls.crt` before it starts: here the harness copies it there, a folder of the work dir.
  The metrics server is off (`metrics.bindAddress: "0"`).
- The rotator waits until it has injected its CA into the conversion webhook of Kueue's CRDs that have one
  (Workload, ClusterQueue, LocalQueue, Cohort, MultiKueueCluster): the CRDs are applied with one pointing at
  this process' webhook server on loopback, as Kueue's kustomize overlay does with its Service. Nothing here
  reads a v1beta1 object (the operator and the tests use v1beta2, the storage version), so the apiserver never
  calls it; a v1beta1 read would fail (the serving certificate names the in-cluster Service, not 127.0.0.1).
- No webhook is registered with the apiserver (no Validating/MutatingWebhookConfiguration): the rotator skips
  them, and the objects the tests make carry every default Kueue's webhooks would set.
- Leader election and the visibility server are off; `integrations.externalFrameworks` lists TrainingJob, as a
  user's Kueue configuration would.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import urllib.request
from pathlib import Path

import yaml

from localcluster import binaries, processes
from localcluster.harness.kube import kubectl
from localcluster.harness.operator import _free_port
from localcluster.harness.waiting import wait_for

NAMESPACE = "kueue-system"
SECRET = "kueue-webhook-server-cert"
# The CRDs whose conversion webhook Kueue's cert rotator injects its CA into (pkg/util/cert/cert.go).
CONVERTED = ("workloads", "clusterqueues", "localqueues", "cohorts", "multikueueclusters")
EXTERNAL_FRAMEWORK = "TrainingJob.v1alpha1.multinode.dev"


def kueue_dir() -> Path:
    return binaries.cache_dir() / "bin" / f"kueue-{binaries.read_versions()['KUEUE_VERSION']}"


def ensure_kueue_built() -> Path:
    """The cached build (`build.sh kueue`, keyed by KUEUE_VERSION); built now when missing."""
    out = kueue_dir()
    if not (out / "manager").exists() or not (out / "crds").is_dir():
        subprocess.run([str(binaries.BUILD_SCRIPT), "kueue"], check=True)
    return out


def crd_documents(webhook_port: int) -> list[dict]:
    """Kueue's CRDs, those with v1beta1↔v1beta2 conversion pointing at the local webhook server."""
    docs = []
    for path in sorted((ensure_kueue_built() / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["plural"] in CONVERTED:
            crd = copy.deepcopy(crd)
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": f"https://127.0.0.1:{webhook_port}/convert"}}}
        docs.append(crd)
    return docs


class KueueProcess:
    """Kueue's controller manager on the local cluster: `start()` installs its CRDs, namespace and Secret and
    waits until it is ready; `stop()` stops it and `uninstall()` removes what `start()` installed."""

    def __init__(self, kubeconfig: str, work_dir: Path):
        self.kubeconfig, self.dir = kubeconfig, work_dir
        self.webhook_port, self.health_port = _free_port(), _free_port()
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "kueue.log"

    @property
    def marker(self) -> str:
        return str(self.dir / "kueue-config.yaml")  # in the command line: processes.stop checks it

    def _apply(self, docs: list[dict]) -> None:
        path = self.dir / "kueue-objects.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        kubectl(self.kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(path))

    def install(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._apply(crd_documents(self.webhook_port))
        for crd in CONVERTED:
            # Polled, not `kubectl wait`: a CRD just applied may have no status.conditions yet, which it takes
            # for an error.
            wait_for(lambda name=f"crd/{crd}.kueue.x-k8s.io": "True" in kubectl(
                self.kubeconfig, "get", name, "-o",
                "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False).stdout,
                timeout=60, what=f"CRD {crd}.kueue.x-k8s.io Established")
        # The last module's uninstall deletes the namespace without waiting: one still terminating refuses the
        # Secret ("unable to create new content in namespace kueue-system because it is being terminated").
        wait_for(lambda: kubectl(self.kubeconfig, "get", "namespace", NAMESPACE, "-o", "jsonpath={.status.phase}",
                                 check=False).stdout.strip() != "Terminating",
                 timeout=120, what=f"namespace {NAMESPACE} of an earlier install gone")
        self._apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                     {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                      "metadata": {"name": SECRET, "namespace": NAMESPACE}}])

    def start(self, timeout: float = 90) -> None:
        self.install()
        certs = self.dir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        config = self.dir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "namespace": NAMESPACE,
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True, "webhookServiceName": "kueue-webhook-service",
                                       "webhookSecretName": SECRET},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "clientConnection": {"qps": 50, "burst": 100},
            "featureGates": {"VisibilityOnDemand": False},
            "integrations": {"frameworks": ["batch/job"], "externalFrameworks": [EXTERNAL_FRAMEWORK]},
        }))
        args = [str(ensure_kueue_built() / "manager"), f"--config={config}", f"--kubeconfig={self.kubeconfig}",
                "--zap-log-level=info"]
        self.proc = processes.start(args, self.log, die_with_parent=True)
        self._wait_ready(timeout)

    def _project_certs(self) -> None:
        """What the kubelet's Secret volume would do: the Secret's tls.crt and tls.key into webhook.certDir."""
        certs = self.dir / "certs"
        if (certs / "tls.crt").exists():
            return
        got = kubectl(self.kubeconfig, "get", "secret", SECRET, "-n", NAMESPACE, "-o", "json", check=False)
        data = json.loads(got.stdout).get("data") or {} if got.returncode == 0 else {}
        if "tls.crt" in data and "tls.key" in data:
            (certs / "tls.key").write_bytes(base64.b64decode(data["tls.key"]))
            (certs / "tls.crt").write_bytes(base64.b64decode(data["tls.crt"]))

    def _wait_ready(self, timeout: float) -> None:
        """/readyz of the main manager answers once the certificates are in place and its webhook server runs."""
        url = f"http://127.0.0.1:{self.health_port}/readyz"

        def ready() -> bool:
            self._project_certs()
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"kueue exited with {self.proc.returncode}; log: {self.log}\n"
                                   + self.log.read_text()[-3000:])
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    return resp.status == 200 and "Starting manager" in self.log.read_text()
            except OSError:
                return False

        wait_for(ready, timeout=timeout, interval=0.5, what=f"kueue ready at {url} (log: {self.log})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            processes.stop(self.proc.pid, self.marker, grace_seconds=10)

    def uninstall(self) -> None:
        """Remove Kueue's CRDs (and so every Kueue object) and its namespace. Kueue is stopped by now, so the
        finalizers it puts on its objects (a ClusterQueue in use, a Workload with quota) are nobody's to
        remove: they are cleared first, or a CRD's deletion would wait on them for ever."""
        for path in sorted((ensure_kueue_built() / "crds").glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            name, scoped = crd["metadata"]["name"], crd["spec"]["scope"] == "Namespaced"
            listed = kubectl(self.kubeconfig, "get", name, *(("-A",) if scoped else ()), "-o", "json",
                             check=False)
            for obj in json.loads(listed.stdout or "{}").get("items") or () if listed.returncode == 0 else ():
                meta = obj["metadata"]
                if meta.get("finalizers"):
                    kubectl(self.kubeconfig, "patch", name, meta["name"],
                            *(("-n", meta["namespace"]) if scoped else ()), "--type=merge",
                            "-p", '{"metadata":{"finalizers":null}}', check=False)
            kubectl(self.kubeconfig, "delete", "crd", name, "--ignore-not-found", "--wait=true", check=False)
        kubectl(self.kubeconfig, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false",
                check=False)
