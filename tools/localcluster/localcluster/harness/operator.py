"""Run `multinode operator` as a real process against the test cluster, and stop it again."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from localcluster import processes
from localcluster.binaries import REPO_ROOT
from localcluster.harness.waiting import wait_for

CRD_FILE = REPO_ROOT / "crds" / "trainingjobs.multinode.dev.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leader_election_env(namespace: str, identity: str, *, lease: str = "multinode-operator",
                        duration: float = 15, renew_deadline: float = 10, retry_period: float = 2) -> dict[str, str]:
    """The environment of an operator replica that competes for Lease `namespace`/`lease` as `identity`
    (client-go's default timings unless given)."""
    return {"MULTINODE_LEADER_ELECTION": "true", "MULTINODE_LEASE_NAMESPACE": namespace,
            "MULTINODE_LEASE_NAME": lease, "MULTINODE_LEADER_IDENTITY": identity,
            "MULTINODE_LEASE_DURATION_SECONDS": str(duration), "MULTINODE_RENEW_DEADLINE_SECONDS": str(renew_deadline),
            "MULTINODE_RETRY_PERIOD_SECONDS": str(retry_period)}


class OperatorProcess:
    def __init__(self, kubeconfig: str, namespaces: list[str], log_path: Path, extra_env: dict | None = None,
                 token: str | None = None, profile_to: Path | None = None):
        self.kubeconfig = kubeconfig
        self.namespaces = namespaces
        self.log_path = log_path
        self.extra_env = extra_env or {}
        # cProfile of the operator's main thread (kopf's event loop: watch decoding, dispatch, reconciles;
        # not the request threads), written when it stops.
        self.profile_to = profile_to
        self.port = _free_port()
        self.metrics_port = _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def marker(self) -> str:
        return f"127.0.0.1:{self.port}/healthz"

    def start(self, wait_ready: bool = True) -> None:
        profile = ["-m", "cProfile", "-o", str(self.profile_to)] if self.profile_to else []
        args = [sys.executable, *profile, "-m", "multinode.cli.main", "operator", "--liveness", f"http://{self.marker}",
                "--metrics-port", str(self.metrics_port), "--metrics-address", "127.0.0.1"]
        for ns in self.namespaces:
            args += ["--namespace", ns]
        env = dict(os.environ, KUBECONFIG=self.kubeconfig, **self.extra_env)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait_ready:
            wait_for(self.healthy, timeout=60, what=f"operator liveness (log: {self.log_path})")

    def healthy(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"operator exited; log: {self.log_path}\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://{self.marker}", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def metrics(self) -> dict[str, list]:
        """Scraped /metrics, parsed with prometheus-client's parser: family name → samples."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return {family.name: family.samples for family in text_string_to_metric_families(text)}

    def leading(self) -> bool:
        """multinode_leader is 1: this process holds the leader election Lease (or runs without election).
        False while it is a standby, or when it does not answer (killed, still starting)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            samples = self.metrics().get("multinode_leader") or []
        except OSError:
            return False
        return bool(samples) and samples[0].value == 1

    def counter(self, name: str) -> float:
        """A counter's value (its _total sample), e.g. counter("multinode_pods_created")."""
        return sum(s.value for s in self.metrics().get(name) or [] if s.name.endswith("_total"))

    def kill(self) -> None:
        """SIGKILL, as a crashing node or an OOM kill would."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            processes.stop(self.proc.pid, self.marker, grace_seconds=10)
            self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""
