"""The wheel `make dist` builds (the one PyPI gets and the image installs), in a fresh venv with its
dependencies from the index, as `pip install multinode-operator` does: `multinode --version`, the operator
starts, preflight and mirror run from it.

No image can be built here (no Docker engine); this is everything of the image that can be tested.
"""

from __future__ import annotations

import os
import subprocess
import urllib.request
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.harness.operator import _free_port
from localcluster.harness.waiting import wait_for
from tests.support.packaging import PROJECT_VERSION, WHEEL_NAME, make_dist


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """bin/ of a fresh venv with only the built wheel (and its declared dependencies) installed."""
    root = tmp_path_factory.mktemp("wheel")
    make_dist(root / "dist")
    wheel = root / "dist" / WHEEL_NAME
    venv.create(root / "venv", with_pip=True)
    bin_dir = root / "venv" / "bin"
    subprocess.run([str(bin_dir / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
                   check=True, timeout=600)
    yield bin_dir


def test_the_installed_wheel_answers_multinode_version(installed: Path) -> None:
    done = subprocess.run([str(installed / "multinode"), "--version"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"multinode {PROJECT_VERSION}\n"


def test_the_wheel_carries_no_test_or_dev_code(installed: Path) -> None:
    listing = subprocess.run([str(installed / "python"), "-c",
                              ("import multinode, pkgutil; print(sorted(m.name for m in pkgutil.walk_packages("
                               "multinode.__path__, 'multinode.')))")], capture_output=True, text=True, check=True)
    modules = listing.stdout
    assert "multinode.controller.handlers" in modules and "multinode.checkpoints.mirror_pass" in modules
    assert "multinode.preflight.program" in modules and "multinode.preflight.collective_net" in modules
    assert "localcluster" not in modules and "tests" not in modules


def test_operator_from_the_wheel_starts_and_is_live(installed: Path, kubeconfig: str, crd: str, tmp_path: Path) -> None:
    port = _free_port()
    log = tmp_path / "operator.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(installed / "multinode"), "operator", "--namespace", "wheel-nothing-here",
                                 "--liveness", f"http://127.0.0.1:{port}/healthz", "--metrics-port", "0"],
                                env=dict(os.environ, KUBECONFIG=kubeconfig), stdout=out, stderr=subprocess.STDOUT)
    try:
        def live() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False
        wait_for(live, timeout=60, what="the wheel's operator to be live")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    first_line = log.read_text().splitlines()[0]
    assert first_line.endswith(f"INFO multinode multinode operator {PROJECT_VERSION} starting"), first_line


def test_preflight_and_mirror_run_from_the_wheel(installed: Path, tmp_path: Path, kubeconfig: str, crd: str) -> None:
    # The whole preflight program: the node check (/dev/shm), the DNS wait and the collective test's entry
    # (one node: no ring to form).
    preflight = subprocess.run([str(installed / "multinode"), "preflight", "--peers", "localhost", "--timeout", "10",
                                "--make-dir", str(tmp_path / "cache" / "job"), "--check-shm", "1Ki",
                                "--collective-min-gbps", "1", "--node-index", "0", "--collective-port", "1",
                                "--collective-id", "wheel"],
                               capture_output=True, text=True, timeout=60, check=False)
    assert preflight.returncode == 0, preflight.stderr
    assert "node health check passed: /dev/shm >= 1024 bytes" in preflight.stderr
    assert "all 1 peers resolve" in preflight.stderr
    assert "node health check passed: collective bandwidth: one node, no ring" in preflight.stderr

    source, dest = tmp_path / "cache" / "job", tmp_path / "ckpt" / "job"
    (source / "checkpoint-1").mkdir(parents=True)
    (source / "checkpoint-1" / "rank_0.pt").write_bytes(b"x" * 1024)
    (source / "checkpoint-1" / "COMPLETE").write_text("")
    sync = subprocess.run([str(installed / "python"), "-m", "multinode.checkpoints.cli_sync", str(source), str(dest)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert sync.returncode == 0, sync.stderr
    assert (dest / "checkpoint-1" / "rank_0.pt").read_bytes() == b"x" * 1024
    # The real `multinode mirror` (engine, reporter, metrics): for a job that is gone it exits 0.
    mirror = subprocess.run([str(installed / "multinode"), "mirror", "--source", str(source), "--dest", str(dest),
                             "--job", "no-such-job", "--namespace", "default", "--metrics-port", "0"],
                            capture_output=True, text=True, timeout=60, env=dict(os.environ, KUBECONFIG=kubeconfig),
                            check=False)
    assert mirror.returncode == 0, mirror.stderr
    assert "the job is gone" in mirror.stderr


def test_the_wheel_installs_the_kubectl_plugin_and_its_completion(installed: Path, kubeconfig: str,
                                                                    crd: str) -> None:
    """kubectl finds `kubectl-multinode` on PATH; kubectl 1.26+ asks `kubectl_complete-multinode` for words."""
    env = dict(os.environ, KUBECONFIG=kubeconfig, NO_COLOR="1")
    missing = subprocess.run([str(installed / "kubectl-multinode"), "status", "nope", "-n", "default"],
                             check=False, capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 1
    assert missing.stderr.strip() == 'error: TrainingJob "nope" not found in namespace "default"'
    words = subprocess.run([str(installed / "kubectl_complete-multinode"), "lo"], capture_output=True, text=True,
                           timeout=60, env=env, check=True)
    assert words.stdout.split() == ["logs", ":4"]
