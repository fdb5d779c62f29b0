"""Flux on a local cluster, for GitOps tests: its CRDs, and source-, kustomize- and helm-controller (built from the
Go module proxy, build.sh flux) as processes on loopback with the cluster's admin kubeconfig, as `flux install`
runs them in-cluster. source-controller serves the artifacts it fetched (git commits, OCI charts) over HTTP
on a loopback port, where the other two download them.

    with FluxControllers(kubeconfig, work_dir) as flux:
        ...  # create GitRepository, Kustomization, OCIRepository, HelmRelease objects
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

from localcluster import binaries
from localcluster.harness.kube import kubectl
from localcluster.harness.waiting import wait_for

CONTROLLERS = ("source-controller", "kustomize-controller", "helm-controller")
# GitOps objects' API groups (what the test cleans up before the CRDs go).
KINDS = ("kustomizations.kustomize.toolkit.fluxcd.io", "helmreleases.helm.toolkit.fluxcd.io",
         "gitrepositories.source.toolkit.fluxcd.io", "ocirepositories.source.toolkit.fluxcd.io")


def flux_dir() -> Path:
    v = binaries.read_versions()
    out = binaries.cache_dir() / "bin" / (f"flux-{v['FLUX_SOURCE_CONTROLLER_VERSION']}-"
                                          f"{v['FLUX_KUSTOMIZE_CONTROLLER_VERSION']}-{v['FLUX_HELM_CONTROLLER_VERSION']}")
    if not all((out / c).exists() for c in CONTROLLERS):
        binaries.ensure("flux")
    return out


def install_crds(kubeconfig: str) -> None:
    """Flux's CRDs, as `flux install` applies them (the docs' Flux objects are dry-run against them too)."""
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(flux_dir() / "crds"))
    for crd in KINDS:
        kubectl(kubeconfig, "wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FluxControllers:
    def __init__(self, kubeconfig: str, work_dir: Path, namespace: str = "flux-system"):
        self.kubeconfig, self.work_dir, self.namespace = kubeconfig, work_dir, namespace
        self.dir = flux_dir()
        self._procs: dict[str, subprocess.Popen] = {}
        self._health: dict[str, int] = {}

    def __enter__(self) -> FluxControllers:
        install_crds(self.kubeconfig)
        (self.work_dir / "storage").mkdir(parents=True, exist_ok=True)
        storage = _free_port()
        for name in CONTROLLERS:
            health = self._health[name] = _free_port()
            args = [str(self.dir / name), f"--metrics-addr=127.0.0.1:{_free_port()}",
                    f"--health-addr=127.0.0.1:{health}", "--log-level=info", "--log-encoding=console",
                    # dependsOn is checked again this often (30 s by default): the test's jobs wait on the chart.
                    "--requeue-dependency=2s"]
            if name == "source-controller":
                args += [f"--storage-path={self.work_dir / 'storage'}", f"--storage-addr=127.0.0.1:{storage}",
                         f"--storage-adv-addr=127.0.0.1:{storage}"]
            env = dict(os.environ, KUBECONFIG=self.kubeconfig, RUNTIME_NAMESPACE=self.namespace)
            with open(self.work_dir / f"{name}.log", "ab") as log:
                self._procs[name] = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                     start_new_session=True)
        try:
            for name in CONTROLLERS:
                wait_for(lambda name=name: self._healthy(name), timeout=60, what=f"{name} healthy")
        except BaseException:
            self.__exit__()  # `with` calls it only once __enter__ returned
            raise
        return self

    def _healthy(self, name: str) -> bool:
        proc = self._procs[name]
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited {proc.returncode}:\n{self.log_tail(name)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self._health[name]}/readyz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.work_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self._procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
