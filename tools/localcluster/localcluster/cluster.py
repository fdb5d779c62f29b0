"""Start and stop one local control plane: etcd, kube-apiserver (RBAC), controller-manager, scheduler, kwok,
an OCI registry (registry.py), and optionally real nodes (kubelet + containerd, realcluster.py) beside the
kwok nodes.

State of a cluster lives in `<cache>/clusters/<name>/`: data, certificates, logs, the admin kubeconfig
(a stable path) and `state.json`, which records the pids so that `stop` works from another process.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from localcluster import binaries, netplan, processes, realcluster
from localcluster import registry as registry_server
from localcluster.hostservices import make_kubelet_client_pki
from localcluster.kubeconfig import write_kubeconfig
from localcluster.nodes import NodePoolConfig, render_fake_gpu_node
from localcluster.timings import TIMINGS, NodeTimings

STAGES_DIR = Path(__file__).resolve().parent / "stages"
# kwok's own stages we use: nodes become Ready and keep their lease; deleted pods go away; plus its
# chaos stages (fail a container, make a node NotReady) for failure tests. Pods start and finish through
# our stages in ./stages (optional start delay, finish on request).
KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "node/chaos/node-not-ready.yaml",
    "pod/fast/pod-delete.yaml",
    "pod/chaos/pod-container-running-failed.yaml",
    "pod/chaos/pod-init-container-running-failed.yaml",
)
# GenericWorkload serves Workload/PodGroup and pods' spec.schedulingGroup; GangScheduling holds a group's pods
# until minCount fit; the other two let a PodGroup carry a topology constraint and a priority (group
# preemption).
GANG_FEATURE_GATES = ("GenericWorkload", "GangScheduling", "TopologyAwareWorkloadScheduling",
                      "WorkloadAwarePreemption")
GANG_API_VERSION = "scheduling.k8s.io/v1alpha2"
# The scheduler's only: 1.36's requeues a PodGroup member it cannot place after its backoff whatever happened
# (backend/queue: no event-based requeueing for pod groups yet), and SchedulerPopFromBackoffQ (beta, on) takes
# pods out of backoff at once whenever the active queue is empty: a gang waiting for capacity was retried
# ~7 000 times a second, a core busy for as long as it waited. Off, it waits out its backoff (1 s doubling to
# 10 s). docs/user-guide.md (Native gang) recommends the same to admins who turn the gang gates on.
SCHEDULER_GANG_GATES = ("SchedulerPopFromBackoffQ=false",)
STOP_ORDER = ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "registry")
REAL_NODE_POOL_PREFIX = "real-node"


@dataclass
class ClusterConfig:
    name: str = "default"
    nodes: NodePoolConfig = field(default_factory=NodePoolConfig)
    # Real kubelet + containerd nodes beside the kwok ones (root only; one real-node cluster per host).
    real_nodes: int = 0
    # Node-lifecycle timings, a key of TIMINGS; the two fields after it override one value of the preset.
    timings: str = "short"
    node_monitor_grace_period: str | None = None
    not_ready_toleration_seconds: int | None = None
    def node_timings(self) -> NodeTimings:
        if self.timings not in TIMINGS:
            raise ValueError(f"timings {self.timings!r}: expected one of {', '.join(TIMINGS)}")
        preset = TIMINGS[self.timings]
        grace = self.node_monitor_grace_period or preset.node_monitor_grace_period
        return replace(preset, node_monitor_grace_period=grace,
                       not_ready_toleration_seconds=(preset.not_ready_toleration_seconds
                                                     if self.not_ready_toleration_seconds is None
                                                     else self.not_ready_toleration_seconds))

    # A cluster owned by a test session dies with it, even when the session is SIGKILLed.
    die_with_parent: bool = False
    client_qps: int = 500
    ready_timeout_seconds: float = 120.0
    # Benchmarks count requests per user: kube-apiserver writes a Metadata-level audit log (JSON lines)
    # to <cluster dir>/audit.log. Off by default: it costs apiserver CPU.
    audit_log: bool = False
    # Extra kube-controller-manager flags, e.g. ("--vmodule=job_controller=4",) to see why a Job waits.
    controller_manager_args: tuple[str, ...] = ()
    # Kubernetes 1.36's alpha gang scheduling (scheduling.k8s.io/v1alpha2 Workload and PodGroup): the feature
    # gates in the apiserver, controller-manager (the PodGroup protection controller removes the finalizer
    # admission stamps) and scheduler, and the API version served. Off: a cluster that does not serve the
    # API, for the operator's fallback.
    gang_scheduling: bool = True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    def __init__(self, config: ClusterConfig | None = None):
        self.config = config or ClusterConfig()
        self.dir = binaries.cache_dir() / "clusters" / self.config.name
        self.kubeconfig = self.dir / "kubeconfig"
        self.state_file = self.dir / "state.json"
        self.real: realcluster.RealNodeSet | None = None
        # Processes this object started. Between fork and exec a child's command line is still ours,
        # so liveness during start-up is asked of Popen, not read from /proc.
        self._started: dict[str, subprocess.Popen] = {}

    # ---- state ---------------------------------------------------------------------------------

    def _load_state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {"pids": {}}

    def _save_state(self, state: dict) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    @property
    def marker(self) -> str:
        """A string in every command line of this cluster's processes: its state folder."""
        return str(self.dir)

    def is_running(self) -> bool:
        state = self._load_state()
        pids = state.get("pids", {})
        if not set(STOP_ORDER) <= set(pids):
            return False
        if not all(processes.is_alive(pid, self.marker) for pid in pids.values()):
            return False
        return self._readyz(state) == "ok"

    # ---- start ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every component, create the fake nodes and wait until they are Ready."""
        bins = binaries.ensure_built()
        if self.state_file.exists():
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "logs").mkdir(parents=True)
        state: dict = {"pids": {}}
        try:
            journal = None
            if self.config.real_nodes:
                pool = replace(self.config.nodes, count=self.config.real_nodes, name_prefix=REAL_NODE_POOL_PREFIX)
                self.real = realcluster.RealNodeSet(self.config.name, pool, self.dir / "real", bins)
                journal = self.real.prepare_host(self.dir)
            self._start_all(bins, state)
            self.create_nodes(self.config.nodes)
            if self.real and journal:
                self.real.start(journal, lambda name, args, env: self._launch(state, name, args, env),
                                self.server, self.dir / "certs" / "apiserver.crt",
                                self.dir / "pki" / "kubelet-client-ca.crt", self.apply, self.kubeconfig,
                                self.registry)
            self.wait_nodes_ready(self.config.nodes.count + self.config.real_nodes)
            if self.real:
                from kubernetes import client

                self.real.wait_ready(client.CoreV1Api(self.api_client()), self.config.ready_timeout_seconds)
        except BaseException:
            self._save_state(state)
            self.stop()
            raise

    @property
    def address(self) -> str:
        """Where the apiserver listens: loopback, or with real nodes an address their pods can route to."""
        return self._load_state().get("address") or (netplan.API_ADDRESS if self.config.real_nodes else "127.0.0.1")

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self._load_state()['api_port']}"

    @property
    def registry(self) -> str:
        """host:port of the cluster's OCI registry (plain HTTP on loopback): what `make push` pushes to."""
        return registry_server.address(self._load_state()["registry_port"])

    def _launch(self, state: dict, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        proc = processes.start(args, self.dir / "logs" / f"{name}.log", self.config.die_with_parent, env)
        self._started[name] = proc
        state["pids"][name] = proc.pid
        self._save_state(state)

    def _start_all(self, bins: binaries.Binaries, state: dict) -> None:
        d = self.dir
        # The registry first: it needs nothing, and is serving by the time the apiserver is.
        state["registry_port"] = _free_port()
        self._launch(state, "registry", registry_server.args(bins.registry,
                                                             registry_server.write_config(d, state["registry_port"])))
        etcd_port, etcd_peer, api_port = _free_port(), _free_port(), _free_port()
        token = secrets.token_hex(24)
        state.update(api_port=api_port, etcd_port=etcd_port, token=token, address=self.address)
        tokens = [f'{token},multinode-admin,multinode-admin,"system:masters"']
        tokens += self.real.token_lines() if self.real else []
        (d / "tokens.csv").write_text("\n".join(tokens) + "\n")
        subprocess.run(["openssl", "genrsa", "-out", str(d / "sa.key"), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")],
                       check=True, capture_output=True)

        self._launch(state, "etcd", [
            str(bins.etcd), "--name=local", f"--data-dir={d / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=local=http://127.0.0.1:{etcd_peer}",
            "--unsafe-no-fsync=true", "--log-level=warn", "--quota-backend-bytes=8589934592",
        ])
        self._launch(state, "kube-apiserver", [
            str(bins.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--cert-dir={d / 'certs'}",
            f"--secure-port={api_port}", f"--bind-address={self.address}", f"--advertise-address={self.address}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            # As kubeadm and managed clusters run it: privileged pods are possible at all, so what refuses
            # them is Pod Security admission and the chart's admission policies (both on by default), as
            # on users' clusters.
            "--allow-privileged=true",
            f"--token-auth-file={d / 'tokens.csv'}",
            f"--service-cluster-ip-range={netplan.SERVICE_RANGE}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            f"--default-not-ready-toleration-seconds={self.config.node_timings().not_ready_toleration_seconds}",
            f"--default-unreachable-toleration-seconds={self.config.node_timings().not_ready_toleration_seconds}",
            "--max-requests-inflight=800", "--max-mutating-requests-inflight=400",
            "--profiling=false", "--v=0",
            *self._audit_args(),
            *self._kubelet_client_args(),
            *self._gang_args(runtime_config=True),
        ])
        self._wait_readyz(state)
        registry_server.wait_serving(self.registry, self.config.ready_timeout_seconds,
                                     lambda: self._started["registry"].poll() is None)
        self._write_kubeconfig(state)
        cert = d / "certs" / "apiserver.crt"
        kc = str(self.kubeconfig)
        timings = self.config.node_timings()
        qps = self.config.client_qps
        self._launch(state, "kube-controller-manager", [
            str(bins.kube_controller_manager), f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={_free_port()}", "--leader-elect=false",
            f"--root-ca-file={cert}", f"--service-account-private-key-file={d / 'sa.key'}",
            "--use-service-account-credentials=true",
            f"--node-monitor-period={timings.node_monitor_period}",
            f"--node-monitor-grace-period={timings.node_monitor_grace_period}",
            f"--kube-api-qps={qps}", f"--kube-api-burst={qps * 2}",
            "--concurrent-gc-syncs=50", "--concurrent-job-syncs=50",
            "--profiling=false",
            *self._gang_args(),
            *self.config.controller_manager_args,
        ])
        scheduler_config = d / "scheduler.yaml"
        scheduler_config.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": kc, "qps": qps, "burst": qps * 2},
            "leaderElection": {"leaderElect": False},
        }))
        # Its port is kept: benchmarks read the scheduler's own metrics (scheduler_metrics()).
        state["scheduler_port"] = _free_port()
        self._launch(state, "kube-scheduler", [
            str(bins.kube_scheduler), f"--config={scheduler_config}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={state['scheduler_port']}", "--profiling=false",
            *self._gang_args(scheduler=True),
        ])
        stage_files = [str(bins.kwok_stages / f) for f in KWOK_STAGE_FILES]
        stage_files += [str(p) for p in sorted(STAGES_DIR.glob("*.yaml"))]
        self._launch(state, "kwok", [
            str(bins.kwok), f"--kubeconfig={kc}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={netplan.KWOK_POD_RANGE}", "--node-ip=127.0.0.1",
            f"--node-lease-duration-seconds={timings.node_lease_duration_seconds}",
            f"--server-address=127.0.0.1:{_free_port()}",
            f"--config={','.join(stage_files)}",
        ])

    def _gang_args(self, runtime_config: bool = False, scheduler: bool = False) -> list[str]:
        """Feature gates of gang scheduling, and (apiserver) the API version that serves it."""
        if not self.config.gang_scheduling:
            return []
        named = [f"{g}=true" for g in GANG_FEATURE_GATES] + list(SCHEDULER_GANG_GATES if scheduler else ())
        gates = [f"--feature-gates={','.join(named)}"]
        return gates + ([f"--runtime-config={GANG_API_VERSION}=true"] if runtime_config else [])

    def _kubelet_client_args(self) -> list[str]:
        """How the apiserver reaches real kubelets (logs, exec): by InternalIP, with a client certificate."""
        if not self.config.real_nodes:
            return []
        _, cert, key = make_kubelet_client_pki(self.dir / "pki")
        return [f"--kubelet-client-certificate={cert}", f"--kubelet-client-key={key}",
                "--kubelet-preferred-address-types=InternalIP,Hostname"]

    def apply(self, objects: list[dict]) -> None:
        """Create objects (cluster-scoped or namespaced), leaving any that exist."""
        from kubernetes import utils

        api = self.api_client()
        for obj in objects:
            try:
                utils.create_from_dict(api, obj)
            except utils.FailToCreateError as e:
                if any(getattr(x, "status", None) != 409 for x in e.api_exceptions):
                    raise

    @property
    def audit_log_path(self) -> Path:
        return self.dir / "audit.log"

    def _audit_args(self) -> list[str]:
        if not self.config.audit_log:
            return []
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [{"level": "Metadata"}],
        }))
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log_path}",
                "--audit-log-format=json", "--audit-log-mode=batch", "--audit-log-batch-max-wait=1s",
                "--audit-log-maxsize=0"]

    def scheduler_metrics(self) -> str:
        """kube-scheduler's /metrics (Prometheus text), asked as the admin: the scheduler delegates the
        token's check to the apiserver. Its serving certificate is self-signed, hence no verification."""
        state = self._load_state()
        req = urllib.request.Request(f"https://127.0.0.1:{state['scheduler_port']}/metrics",
                                     headers={"Authorization": f"Bearer {state['token']}"})
        with urllib.request.urlopen(req, context=ssl._create_unverified_context(), timeout=10) as resp:
            return resp.read().decode()

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.dir / "certs" / "apiserver.crt"))

    def _readyz(self, state: dict) -> str:
        if "api_port" not in state or not (self.dir / "certs" / "apiserver.crt").exists():
            return "no apiserver yet"
        req = urllib.request.Request(f"https://{self.address}:{state['api_port']}/readyz",
                                     headers={"Authorization": f"Bearer {state['token']}"})
        try:
            with urllib.request.urlopen(req, context=self._ssl_context(), timeout=5) as resp:
                return resp.read().decode()
        except urllib.error.HTTPError as e:
            return f"HTTP {e.code}"
        except (OSError, ssl.SSLError) as e:
            return str(e)

    def _wait_readyz(self, state: dict) -> None:
        deadline = time.monotonic() + self.config.ready_timeout_seconds
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self._started.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited; see {self.dir / 'logs' / (name + '.log')}")
            last = self._readyz(state)
            if last == "ok":
                return
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver /readyz not ok after {self.config.ready_timeout_seconds}s: {last}")

    def _write_kubeconfig(self, state: dict) -> None:
        write_kubeconfig(self.kubeconfig, self.server, self.dir / "certs" / "apiserver.crt", "multinode-admin",
                         state["token"], namespace="default")

    def kubeconfig_for_token(self, token: str, path: Path) -> Path:
        """A kubeconfig for this cluster that authenticates with `token` (a ServiceAccount's, say)."""
        return write_kubeconfig(path, self.server, self.dir / "certs" / "apiserver.crt", "token", token)

    # ---- nodes ---------------------------------------------------------------------------------

    def api_client(self):
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def create_nodes(self, pool: NodePoolConfig, start_index: int = 0) -> list[str]:
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        names = []
        for i in range(start_index, start_index + pool.count):
            body = render_fake_gpu_node(pool, i)
            try:
                core.create_node(body)
            except client.ApiException as e:
                if e.status != 409:
                    raise
            names.append(body["metadata"]["name"])
        return names

    def wait_nodes_ready(self, count: int) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        deadline = time.monotonic() + self.config.ready_timeout_seconds
        ready = 0
        while time.monotonic() < deadline:
            ready = sum(
                1 for n in core.list_node().items
                for c in (n.status.conditions or []) if c.type == "Ready" and c.status == "True"
            )
            if ready >= count:
                return
            time.sleep(0.25)
        raise TimeoutError(f"only {ready}/{count} nodes Ready after {self.config.ready_timeout_seconds}s")

    # ---- one real node lost and back -----------------------------------------------------------

    def kill_real_node(self, index: int) -> str:
        """Real node `index` dies as a machine would (realcluster.RealNodeSet.kill_node); returns its name."""
        real = self._real_nodes()
        real.kill_node(index, self._load_state()["pids"], self.marker)
        return real.nodes[index].name

    def restart_real_node(self, index: int) -> None:
        """Start a killed real node's containerd and kubelet again; returns once it is Ready with its GPUs."""
        from kubernetes import client

        real, state = self._real_nodes(), self._load_state()
        real.restart_node(index, lambda name, args, env: self._launch(state, name, args, env))
        real.wait_ready(client.CoreV1Api(self.api_client()), self.config.ready_timeout_seconds)

    def _real_nodes(self) -> realcluster.RealNodeSet:
        if self.real is None:
            raise RuntimeError("this LocalCluster object did not start real nodes")
        return self.real

    # ---- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every process this cluster started; safe to call twice or after a partial start."""
        pids = self._load_state().get("pids", {})
        errors = []
        # Real nodes first (kubelets, containerd, host services), while the apiserver still answers.
        for name in [n for n in pids if n not in STOP_ORDER]:
            try:
                processes.stop(pids[name], self.marker, grace_seconds=5)
            except RuntimeError as e:
                errors.append(f"{name}: {e}")
        for name in STOP_ORDER:
            if name in pids:
                try:
                    processes.stop(pids[name], self.marker)
                except RuntimeError as e:
                    errors.append(f"{name}: {e}")
        # Anything else that mentions our folder (a child a component spawned) goes too.
        for pid in processes.pids_with_marker(self.marker):
            processes.stop(pid, self.marker, grace_seconds=2)
        errors += realcluster.teardown(self.config.name)
        # The registry's storage is the cluster's (hundreds of MB once images are pushed): gone with it.
        shutil.rmtree(self.dir / registry_server.STORAGE_DIR, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)
        if errors:
            raise RuntimeError("; ".join(errors))
