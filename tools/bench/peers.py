"""Shared harness of the peer benchmarks: identities, the JobSet controller, raw watches, audit counts.

Not a benchmark itself. `tools/bench/startup.py` and friends import it (run them with `python -P`).

- Each system under test runs with its own ServiceAccount token (bound to cluster-admin), so the
  apiserver's audit log attributes its requests to it and not to the benchmark's own traffic.
- JobSet (`tools/localcluster/build.sh jobset`) runs as a local process: no webhooks are registered with
  the apiserver (its webhook server listens on loopback with a self-signed certificate only because the
  manager always starts one), cert rotation and leader election are off, and the JobSet objects carry
  every default its defaulting webhook would set.
- Timestamps come from raw watch streams parsed with `json.loads` in a thread: the kubernetes client's
  model deserialisation is slow enough to skew a 1000-pod measurement by seconds.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from datetime import datetime
from pathlib import Path

import yaml
from kubernetes import client
from localcluster import LocalCluster, binaries, processes

REPO = Path(__file__).resolve().parents[2]
SYSTEM_NS = "bench-system"
JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
# The Job controller creates JobSet's pods: its requests count towards JobSet's cost.
JOB_CONTROLLER_USER = "system:serviceaccount:kube-system:job-controller"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
# The test clusters mark a node NotReady 20 s after its last heartbeat (the node-loss tests want that
# fast). With 1000 kwok nodes on 2 saturated cores kwok falls that far behind renewing leases, the
# node controller flaps nodes NotReady, and every system under test reacts to node loss instead of
# starting its job (seen: a 1000-node TrainingJob gang-restarted mid-start). Benchmarks measure starts.
BENCH_NODE_MONITOR_GRACE = "600s"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jobset_dir() -> Path:
    version = binaries.read_versions()["JOBSET_VERSION"]
    return binaries.cache_dir() / "bin" / f"jobset-{version}"


def ensure_jobset_built() -> Path:
    out = jobset_dir()
    if not (out / "manager").exists():
        subprocess.run([str(binaries.BUILD_SCRIPT), "jobset"], check=True)
    return out


# ---- identities ----------------------------------------------------------------------------------

def identity(cluster: LocalCluster, core: client.CoreV1Api, rbac: client.RbacAuthorizationV1Api,
             name: str) -> tuple[str, str]:
    """A cluster-admin ServiceAccount `name` in bench-system: (kubeconfig path, audit user name)."""
    try:
        core.create_namespace({"metadata": {"name": SYSTEM_NS}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    for create, body in (
        (lambda b: core.create_namespaced_service_account(SYSTEM_NS, b), {"metadata": {"name": name}}),
        (rbac.create_cluster_role_binding, {
            "metadata": {"name": f"bench-{name}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": SYSTEM_NS}]}),
    ):
        try:
            create(body)
        except client.ApiException as e:
            if e.status != 409:
                raise
    token = core.create_namespaced_service_account_token(
        name, SYSTEM_NS, {"spec": {"audiences": [], "expirationSeconds": 86400}}).status.token
    path = cluster.kubeconfig_for_token(token, cluster.dir / f"kubeconfig-{name}")
    return str(path), f"system:serviceaccount:{SYSTEM_NS}:{name}"


def wait_http_ok(url: str, proc: subprocess.Popen, deadline: float, what: str) -> None:
    """Poll a controller's health endpoint until it answers 200; fail fast if the process exits."""
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not healthy at {url}")
        time.sleep(0.2)


# ---- JobSet --------------------------------------------------------------------------------------

class JobSetProcess:
    """The JobSet controller manager as a local process, without webhooks or leader election."""

    def __init__(self, kubeconfig: str, work_dir: Path, qps: int = 500):
        self.kubeconfig, self.dir, self.qps = kubeconfig, work_dir, qps
        self.health_port, self.metrics_port, self.webhook_port = free_port(), free_port(), free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def marker(self) -> str:
        return f"127.0.0.1:{self.health_port}"

    def start(self) -> None:
        bin_dir = ensure_jobset_built()
        certs = self.dir / "jobset-certs"
        certs.mkdir(parents=True, exist_ok=True)
        if not (certs / "tls.crt").exists():
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                            "-subj", "/CN=localhost", "-keyout", str(certs / "tls.key"),
                            "-out", str(certs / "tls.crt")],
                           check=True, capture_output=True)
        config = self.dir / "jobset-config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}", "certDir": str(certs)},
            "health": {"healthProbeBindAddress": self.marker},
            "clientConnection": {"qps": self.qps, "burst": self.qps},
        }))
        log = self.dir / "logs" / "jobset.log"
        args = [str(bin_dir / "manager"), f"--config={config}", f"--kubeconfig={self.kubeconfig}",
                f"--health-probe-bind-address={self.marker}", "--zap-log-level=info"]
        self.proc = processes.start(args, log, die_with_parent=True)
        wait_http_ok(f"http://{self.marker}/healthz", self.proc, time.monotonic() + 60, f"jobset manager (log: {log})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            processes.stop(self.proc.pid, self.marker, grace_seconds=10)
            # Its health port can be free while the process is still exiting: until this wait, poll() could
            # say it runs, and Harness.cpu count it in a burst's first reading but not its last.
            self.proc.wait(timeout=10)


def install_jobset_crds(kubeconfig: str) -> None:
    from localcluster.harness.kube import kubectl

    for crd in sorted((ensure_jobset_built() / "crds").glob("*.yaml")):
        kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(crd))
    wait_established(kubeconfig, "jobsets.jobset.x-k8s.io")


def wait_established(kubeconfig: str, crd: str, timeout: float = 60) -> None:
    """Until CRD `crd` is Established. Right after the apply the CRD may have no status yet, which
    `kubectl wait` takes as an error rather than waiting: asked again until the deadline."""
    from localcluster.harness.kube import kubectl

    deadline = time.monotonic() + timeout
    while kubectl(kubeconfig, "wait", "--for=condition=Established", f"--timeout={timeout:.0f}s", f"crd/{crd}",
                  check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {crd} not Established")
        time.sleep(0.5)


def jobset_manifest(name: str, num_nodes: int, gpus: int, image: str = "registry.example/train:1.0") -> dict:
    """One replicated Job of `num_nodes` indexed pods and a headless Service, every webhook default set."""
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}", "kind": "JobSet", "metadata": {"name": name},
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "failurePolicy": {"maxRestarts": 1000},
            "replicatedJobs": [{
                "name": "node", "replicas": 1,
                "template": {"spec": {
                    "parallelism": num_nodes, "completions": num_nodes, "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": {"spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "trainer", "image": image, "command": ["torchrun", "train.py"],
                                        "resources": resources}],
                    }},
                }},
            }],
        },
    }


# ---- raw watches ---------------------------------------------------------------------------------

class RawWatch:
    """Streams watch events of one collection path (plain dicts), re-listing when the stream ends."""

    def __init__(self, api: client.ApiClient, path: str, on_event):
        self.api, self.path, self.on_event = api, path, on_event
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> RawWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cfg = self.api.configuration
                auth = cfg.auth_settings()["BearerToken"]
                resp = self.api.rest_client.pool_manager.request(
                    "GET", f"{cfg.host}{self.path}?watch=true&timeoutSeconds=3600",
                    headers={"Accept": "application/json", auth["key"]: auth["value"]}, preload_content=False)
                if resp.status != 200:
                    raise RuntimeError(f"watch {self.path}: HTTP {resp.status}")
                buf = b""
                for chunk in resp.stream(65536):
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if line.strip():
                            now = time.monotonic()
                            event = json.loads(line)
                            self.on_event(event["type"], event["object"], now)
            except Exception as e:  # noqa: BLE001 - closed by stop(), or a broken stream: watch again
                if not self._stop.is_set():
                    print(f"watch {self.path}: {e!r}; again", file=sys.stderr, flush=True)
                    time.sleep(0.2)

    def stop(self) -> None:
        # Closing the response from another thread can block on the reader's lock; the thread is a
        # daemon, and its stream ends when the cluster stops.
        self._stop.set()


def wait_on(cond: threading.Condition, predicate, timeout: float, what: str = "benchmark condition"):
    """Wait, holding `cond`, until `predicate()` is truthy; notified by watch threads, and looking again
    at least every 100 ms for changes that come without a notification (a job's status)."""
    deadline = time.monotonic() + timeout
    with cond:
        while True:
            value = predicate()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"timed out waiting for {what}")
            cond.wait(min(left, 0.1))


class Clock:
    """First-seen timestamps (monotonic) per object and milestone, fed by RawWatch callbacks."""

    def __init__(self):
        self.cond = threading.Condition()
        self.pods: dict[str, dict] = {}  # uid → {"job": key, "name", "created", "scheduled", "running", "deleted"}
        self.status: dict[str, dict] = {}  # job key → {"running": t}

    def wait(self, predicate, timeout: float, what: str = "benchmark condition"):
        return wait_on(self.cond, predicate, timeout, what)

    def pod_event(self, kind: str, pod: dict, now: float, job_of) -> None:
        job = job_of(pod)
        if job is None:
            return
        uid = pod["metadata"]["uid"]
        with self.cond:
            rec = self.pods.setdefault(uid, {"job": job, "name": pod["metadata"]["name"], "created": now})
            if pod.get("spec", {}).get("nodeName"):
                rec.setdefault("scheduled", now)
            if (pod.get("status") or {}).get("phase") == "Running":
                rec.setdefault("running", now)
            if (pod.get("status") or {}).get("phase") == "Failed":
                rec.setdefault("failed", now)
            if kind == "DELETED":
                rec.setdefault("deleted", now)
            self.cond.notify_all()

    def job_event(self, key: str, running: bool, now: float) -> None:
        with self.cond:
            if running:
                self.status.setdefault(key, {}).setdefault("running", now)
            self.cond.notify_all()

    def of(self, job: str) -> list[dict]:
        return [r for r in self.pods.values() if r["job"] == job]

    def live(self, job: str | None = None) -> int:
        return sum(1 for r in self.pods.values() if "deleted" not in r and (job is None or r["job"] == job))


def trainingjob_running(obj: dict) -> bool:
    return (obj.get("status") or {}).get("phase") == "Running"


def jobset_running(obj: dict) -> bool:
    """JobSet has no phase: every replicated Job counts as ready (all its pods Ready) and none failed."""
    status = obj.get("status") or {}
    rjobs = status.get("replicatedJobsStatus") or []
    wanted = len(obj["spec"]["replicatedJobs"])
    return len(rjobs) == wanted and all(r.get("ready", 0) >= 1 for r in rjobs) and not status.get("terminalState")


# ---- audit log -----------------------------------------------------------------------------------

def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def audit_counts(path: Path, users: set[str], windows: list[tuple[float, float]]) -> list[Counter]:
    """Per wall-clock window: requests of `users` by (verb class, resource), e.g. ("write", "pods")."""
    counts = [Counter() for _ in windows]
    if not path.exists():
        return counts
    with open(path) as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("user", {}).get("username") not in users or ev.get("stage") != "ResponseComplete":
                continue
            t = _ts(ev["requestReceivedTimestamp"])
            verb = ev.get("verb", "")
            ref = ev.get("objectRef") or {}
            resource = ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else "")
            cls = "write" if verb in WRITE_VERBS else ("watch" if verb == "watch" else "read")
            for i, (a, b) in enumerate(windows):
                if a <= t <= b:
                    counts[i][(cls, resource)] += 1
    return counts


def summarize_counts(counter: Counter, pods: int) -> dict:
    reads = sum(v for (c, _), v in counter.items() if c == "read")
    writes = sum(v for (c, _), v in counter.items() if c == "write")
    watches = sum(v for (c, _), v in counter.items() if c == "watch")
    return {"reads": reads, "writes": writes, "watches_opened": watches,
            "reads_per_pod": reads / pods, "writes_per_pod": writes / pods,
            "by_resource": {f"{c} {r}": v for (c, r), v in sorted(counter.items())}}


def terminated_watchers(api: client.ApiClient, resource: str = "pods") -> float:
    """How many watchers of `resource` kube-apiserver has closed so far because they fell behind its events
    (`apiserver_terminated_watchers_total`): each such client lists and watches again. A burst that creates
    pods faster than the cluster's other controllers read their events costs them that."""
    cfg = api.configuration
    auth = cfg.auth_settings()["BearerToken"]
    text = api.rest_client.pool_manager.request("GET", f"{cfg.host}/metrics",
                                                headers={auth["key"]: auth["value"]}).data.decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_terminated_watchers_total{") and f'resource="{resource}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def rss_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_now_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of `pid`, all its threads (fields 14 and 15 of /proc/<pid>/stat, after the
    command name, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cluster_pids(cluster: LocalCluster) -> dict[str, int]:
    """The pids of the cluster's own processes by name ("kube-apiserver", "etcd", ...), from its state file."""
    return {name: int(pid) for name, pid in json.loads(cluster.state_file.read_text())["pids"].items()}


def machine() -> str:
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal:"))
    return f"{os.cpu_count()} cores, {mem_kb / (1 << 20):.0f} GiB"
