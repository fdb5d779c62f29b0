"""The local cluster's OCI registry: distribution's server on loopback, what `make push` puts there (the images
by their layouts' digests, the chart helm installs), and containerd pulling from it through the host
configuration real nodes get. Real nodes pulling it for pods: tests/integration/realnodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from localcluster.harness.waiting import wait_for
from localcluster import LocalCluster, binaries, images, publish, registry

from multinode import __version__
from tests.support.paths import REPO


def _make(target: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A make target of this checkout with the venv running the tests (not reinstalled: -o keeps its stamp)."""
    venv = Path(sys.prefix)
    return subprocess.run(["make", "-s", "-C", str(REPO), "-o", str(venv / ".installed"), target, f"VENV={venv}"],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=600, check=False)


def _crane(*args: str) -> str:
    return subprocess.run([str(binaries.locate().crane), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def pushed(local_cluster: LocalCluster) -> subprocess.CompletedProcess[str]:
    """`make push` into the session cluster's registry, as docs/development.md says to."""
    done = _make("push", {"MULTINODE_REGISTRY": local_cluster.registry})
    assert done.returncode == 0, done.stderr
    return done


def test_the_cluster_serves_distributions_registry_on_loopback(local_cluster: LocalCluster) -> None:
    host, _, port = local_cluster.registry.partition(":")
    assert host == "127.0.0.1" and port.isdigit()
    with urllib.request.urlopen(f"http://{local_cluster.registry}/v2/", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Docker-Distribution-Api-Version"] == "registry/2.0"
    pid = json.loads(local_cluster.state_file.read_text())["pids"]["registry"]
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert command[0].decode() == str(binaries.locate().registry) and command[1] == b"serve"
    config = yaml.safe_load(Path(command[2].decode()).read_text())
    assert config["storage"]["filesystem"]["rootdirectory"] == str(local_cluster.dir / registry.STORAGE_DIR)
    assert config["http"]["addr"] == local_cluster.registry  # loopback only


def test_make_push_pushes_the_images_by_their_layouts_digests(local_cluster: LocalCluster,
                                                              pushed: subprocess.CompletedProcess[str]) -> None:
    built = images.build_images(publish.PUSHED_IMAGES)
    for name in publish.PUSHED_IMAGES:
        repository = f"{local_cluster.registry}/multinode/{name}"
        assert __version__ in _crane("ls", repository).split()
        assert _crane("digest", f"{repository}:{__version__}").strip() == built[name].manifest_digest
        assert f"pushed {repository}:{__version__}" in pushed.stderr


def test_the_pushed_chart_is_what_helm_installs_with_the_registry_image(
        local_cluster: LocalCluster, pushed: subprocess.CompletedProcess[str]) -> None:
    chart = f"oci://{local_cluster.registry}/charts/multinode-operator"
    helm = str(binaries.locate().helm)
    shown = yaml.safe_load(subprocess.run([helm, "show", "chart", chart, "--version", __version__],
                                          capture_output=True, text=True, check=True).stdout)
    assert (shown["name"], shown["version"], shown["appVersion"]) == ("multinode-operator", __version__, __version__)
    repository = f"{local_cluster.registry}/multinode/operator"
    rendered = subprocess.run([helm, "template", "mn", chart, "--version", __version__,
                               "--set", f"image.repository={repository}"],
                              capture_output=True, text=True, check=True).stdout
    [deployment] = [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"{repository}:{__version__}" and container["imagePullPolicy"] == "IfNotPresent"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MULTINODE_OPERATOR_IMAGE"] == f"{repository}:{__version__}"  # the jobs' preflight and mirror


def test_make_push_without_a_registry_says_what_is_missing() -> None:
    done = _make("push", {"MULTINODE_REGISTRY": ""})
    assert done.returncode == 2
    assert "MULTINODE_REGISTRY is not set (make cluster-up prints it)" in done.stdout + done.stderr


def test_containerd_pulls_the_pushed_trainer_through_the_nodes_host_config(
        local_cluster: LocalCluster, pushed: subprocess.CompletedProcess[str], tmp_path: Path) -> None:
    # A private containerd (its own root, state and socket; no CRI plugin), not a node's: `ctr images pull`
    # reads the same hosts.toml a node's CRI does (containerd's registry host configuration).
    bins = binaries.locate()
    run_dir_existed = Path("/run/containerd").exists()  # its shims' sockets go there whatever its state folder
    sock = tmp_path / "containerd.sock"
    config = {"version": 3, "root": str(tmp_path / "root"), "state": str(tmp_path / "state"),
              "disabled_plugins": ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime",
                                   "io.containerd.cri.v1.images"]}
    lines = [f"{k} = {json.dumps(v)}" for k, v in config.items()]
    lines += ["[grpc]", f"  address = {json.dumps(str(sock))}", "[ttrpc]", f"  address = {json.dumps(f'{sock}.ttrpc')}"]
    (tmp_path / "config.toml").write_text("\n".join(lines) + "\n")
    hosts = registry.containerd_hosts(local_cluster.registry, tmp_path / "certs.d")
    assert hosts.parent.name == local_cluster.registry
    daemon = subprocess.Popen([str(bins.containerd), "--config", str(tmp_path / "config.toml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctr = [str(bins.ctr), "--address", str(sock), "--namespace", "k8s.io"]
    trainer = publish.image_reference(local_cluster.registry, images.TRAINER)
    try:
        wait_for(sock.exists, timeout=20, what="containerd's socket")
        subprocess.run([*ctr, "images", "pull", "--hosts-dir", str(tmp_path / "certs.d"), "--snapshotter",
                        "overlayfs", "--platform", "linux/amd64", trainer], capture_output=True, check=True)
        listed = subprocess.run([*ctr, "images", "check"], capture_output=True, text=True,
                                check=True).stdout.splitlines()[1:]
        [row] = [line.split() for line in listed if line.split()[0] == trainer]
        assert row[2] == images.build_images((images.TRAINER,))[images.TRAINER].manifest_digest
        assert row[3] == "complete" and row[-1] == "true"  # every blob fetched, and unpacked
        snapshots = subprocess.run([*ctr, "snapshots", "--snapshotter", "overlayfs", "ls"], capture_output=True,
                                   text=True, check=True).stdout.splitlines()[1:]
        assert len(snapshots) == 3  # base, base+pylib, base+pylib+app
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        if not run_dir_existed:
            subprocess.run(["rm", "-rf", "/run/containerd"], check=True)
    assert not images._mounts_under(tmp_path)
    subprocess.run(["rm", "-rf", "--one-file-system", str(tmp_path)], check=True)
