"""The real nodes' container images: deterministic layers, well-formed archives, images that run.

No cluster is needed. The images come from the cache of `python -m localcluster images` (the first run
debootstraps the base, a few minutes, as root); the checks that run the images use chroot, as root.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from localcluster import images

from tests.support.packaging import PROJECT_VERSION


def _require_root() -> None:
    # Not a skip: CI runs as root, and a skipped test there would hide a broken image build.
    assert os.geteuid() == 0, "debootstrap, chroot and containerd need root"


needs_root = pytest.mark.usefixtures("root")


@pytest.fixture
def root() -> None:
    _require_root()

# Layers hold absolute symlinks and numeric owners: extract them as containerd does, without the filters.
TRUSTED = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


@pytest.fixture(scope="module")
def built() -> dict[str, images.BuiltImage]:
    _require_root()
    return {b.ref: b for b in images.build_images()}


def _tree(root: Path) -> None:
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/tool").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(root / "usr/bin/tool", 0o755)
    os.link(root / "usr/bin/tool", root / "usr/bin/tool-alias")  # sorts after its target
    os.link(root / "usr/bin/tool", root / "usr/bin/a-tool")  # sorts before: becomes the stored file
    (root / "bin").symlink_to("usr/bin")
    (root / "usr/bin/absolute").symlink_to("/usr/bin/tool")
    (root / "usr/bin/dangling").symlink_to("missing")
    (root / "home/user").mkdir(parents=True)
    (root / "home/user" / ("x" * 120)).write_text("a long name")
    os.chown(root / "home/user", 1234, 5678)


def test_pack_layer_is_deterministic_and_keeps_links(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    _tree(tree)
    first = images.pack_layer(tree, tmp_path / "first.tar")
    os.utime(tree / "usr/bin/tool", (1, 1))  # mtimes never reach the layer
    second = images.pack_layer(tree, tmp_path / "second.tar")
    assert first.tar.read_bytes() == second.tar.read_bytes()
    assert first.diff_id == second.diff_id == _sha256(first.tar.read_bytes())

    with tarfile.open(first.tar) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted((m.name for m in members), key=lambda n: n.split("/"))
        assert all(m.mtime == images.LAYER_MTIME and not m.pax_headers and m.uname == "" for m in members)
        by_name = {m.name: m for m in members}
        assert by_name["usr/bin/a-tool"].isreg()
        assert by_name["usr/bin/tool"].islnk() and by_name["usr/bin/tool"].linkname == "usr/bin/a-tool"
        assert by_name["bin"].issym() and by_name["bin"].linkname == "usr/bin"
        assert by_name["usr/bin/dangling"].linkname == "missing"
        assert (by_name["home/user"].uid, by_name["home/user"].gid) == (1234, 5678)
        out = tmp_path / "out"
        tar.extractall(out, numeric_owner=True, **TRUSTED)
    assert os.stat(out / "usr/bin/tool").st_ino == os.stat(out / "usr/bin/tool-alias").st_ino
    assert os.readlink(out / "usr/bin/absolute") == "/usr/bin/tool"
    assert (out / "home/user" / ("x" * 120)).read_text() == "a long name"


@needs_root
def test_the_base_layer_packs_again_to_the_same_bytes(built: dict[str, images.BuiltImage], tmp_path: Path) -> None:
    # The debootstrap tree has hard links, symlinks, setuid files, sticky folders and several owners:
    # unpacked by GNU tar and packed again, it gives the same layer, so nothing was lost or made up.
    base = images.base_layer()
    (tmp_path / "tree").mkdir()
    subprocess.run(["tar", "-x", "--numeric-owner", "-C", tmp_path / "tree", "-f", base.tar], check=True)
    assert images.pack_layer(tmp_path / "tree", tmp_path / "again.tar").diff_id == base.diff_id
    subprocess.run(["rm", "-rf", "--one-file-system", tmp_path], check=True)


def test_debian_mirror_reads_one_line_and_deb822_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/security.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /nonexistent.gpg\n")
    (tmp_path / "sources.list.d/off.list.disabled").write_text("deb http://ignored.example bookworm main\n")
    assert images.debian_mirror(apt_dir=tmp_path) == ("http://mirror.example/debian", None)
    keyring = tmp_path / "key.gpg"
    keyring.touch()
    (tmp_path / "sources.list").write_text(f"deb [arch=amd64 signed-by={keyring}] http://one.example/d bookworm main\n")
    assert images.debian_mirror(apt_dir=tmp_path) == ("http://one.example/d", str(keyring))
    with pytest.raises(RuntimeError, match="trixie"):
        images.debian_mirror("trixie", apt_dir=tmp_path)


def test_the_archive_is_well_formed(built: dict[str, images.BuiltImage]) -> None:
    assert set(built) == {images.PAUSE_IMAGE, images.OPERATOR_IMAGE, images.TRAINER_IMAGE}
    [archive] = {image.archive for image in built.values()}
    with tarfile.open(archive) as tar:
        def read(name: str) -> bytes:
            return tar.extractfile(name).read()

        names = tar.getnames()
        assert len(names) == len(set(names)), "a blob shared by two images is stored once"
        assert json.loads(read("oci-layout")) == {"imageLayoutVersion": "1.0.0"}
        docker = {entry["RepoTags"][0]: entry for entry in json.loads(read("manifest.json"))}
        index = {m["annotations"][images.NAME_ANNOTATION]: m for m in json.loads(read("index.json"))["manifests"]}
        layer_digests = {name: _sha256(read(name)) for entry in docker.values() for name in entry["Layers"]}
        for ref, image in built.items():
            config_bytes = read(docker[ref]["Config"])
            assert _sha256(config_bytes) == image.image_id
            config = json.loads(config_bytes)
            assert (config["architecture"], config["os"]) == ("amd64", "linux")
            diff_ids = [layer_digests[name] for name in docker[ref]["Layers"]]
            assert config["rootfs"] == {"type": "layers", "diff_ids": diff_ids}

            manifest_digest = index[ref]["digest"]
            assert image.digest_ref == ref.rpartition(":")[0] + "@" + manifest_digest
            assert index[image.digest_ref]["digest"] == manifest_digest
            manifest_bytes = read(_blob(manifest_digest))
            assert _sha256(manifest_bytes) == manifest_digest and index[ref]["size"] == len(manifest_bytes)
            manifest = json.loads(manifest_bytes)
            assert manifest["config"] == {"mediaType": "application/vnd.oci.image.config.v1+json",
                                          "digest": image.image_id, "size": len(config_bytes)}
            assert [(layer["digest"], layer["size"]) for layer in manifest["layers"]] == [
                (digest, tar.getmember(_blob(digest)).size) for digest in diff_ids]

    operator = _config(built[images.OPERATOR_IMAGE])
    assert operator["config"]["User"] == "65532:65532"
    assert (operator["config"]["Entrypoint"], operator["config"]["Cmd"]) == (["multinode"], ["operator"])
    # The trainer is the operator's base and pylib layers (containerd stores them once) plus /app/train.py.
    trainer = _config(built[images.TRAINER_IMAGE])
    assert trainer["rootfs"]["diff_ids"][:2] == operator["rootfs"]["diff_ids"]
    assert len(trainer["rootfs"]["diff_ids"]) == 3 and trainer["config"]["WorkingDir"] == "/app"
    assert _config(built[images.PAUSE_IMAGE])["config"]["Entrypoint"] == ["/pause"]


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _blob(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def _config(image: images.BuiltImage) -> dict:
    with tarfile.open(image.archive) as tar:
        return json.load(tar.extractfile(_blob(image.image_id)))


def test_a_warm_build_repacks_nothing(built: dict[str, images.BuiltImage]) -> None:
    [archive] = {image.archive for image in built.values()}
    written = archive.stat().st_mtime_ns
    started = time.monotonic()
    assert {b.ref: b for b in images.build_images()} == built
    assert time.monotonic() - started < 5
    assert archive.stat().st_mtime_ns == written


def test_the_pylib_key_follows_the_operator_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("pyproject.toml", "README.md", "operator"):
        source = images.binaries.REPO_ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / name)
    monkeypatch.setattr(images.binaries, "REPO_ROOT", tmp_path)
    key = images.pylib_key()
    (tmp_path / "operator/multinode/__pycache__").mkdir(exist_ok=True)
    (tmp_path / "operator/multinode/__pycache__/x.cpython-311.pyc").write_bytes(b"not an input")
    assert images.pylib_key() == key
    with open(tmp_path / "operator/multinode/__init__.py", "a") as f:
        f.write("# changed\n")
    assert images.pylib_key() != key


@pytest.fixture(scope="module")
def rootfs(built: dict[str, images.BuiltImage], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The operator image's layers unpacked in order, as containerd does, by GNU tar (quicker than tarfile)."""
    root = tmp_path_factory.mktemp("rootfs")
    root.chmod(0o755)  # as containerd makes it: the non-root user must traverse /
    with tarfile.open(built[images.OPERATOR_IMAGE].archive) as archive:
        entries = json.load(archive.extractfile("manifest.json"))
        [operator] = [entry for entry in entries if entry["RepoTags"] == [images.OPERATOR_IMAGE]]
        for name in operator["Layers"]:
            layer = archive.extractfile(name).read()
            subprocess.run(["tar", "-x", "--numeric-owner", "-C", root], input=layer, check=True)
    yield root
    assert not images._mounts_under(root)
    subprocess.run(["rm", "-rf", "--one-file-system", root], check=True)


def _run(rootfs: Path, image: images.BuiltImage, args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the image's entrypoint with args (replacing its Cmd), in its Env, as its User: chroot does it."""
    config = _config(image)["config"]
    user = ["--userspec", config["User"]] if config.get("User") else []
    cmd = ["chroot", *user, str(rootfs), "/usr/bin/env", "-i", *config["Env"], *config.get("Entrypoint", []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/", check=False)


@needs_root
def test_the_operator_image_runs_multinode_as_nonroot(rootfs: Path, built: dict[str, images.BuiltImage]) -> None:
    done = _run(rootfs, built[images.OPERATOR_IMAGE], ["--version"])
    assert done.returncode == 0, done.stderr
    assert f"multinode {PROJECT_VERSION}" in done.stdout + done.stderr


@needs_root
def test_the_trainer_image_imports_multinode(rootfs: Path, built: dict[str, images.BuiltImage]) -> None:
    code = ("import sys, multinode, kopf, kubernetes, pydantic, prometheus_client, yaml; "
            "assert multinode.__file__.startswith('/opt/pylib/'), multinode.__file__; print(sys.version)")
    done = _run(rootfs, built[images.TRAINER_IMAGE], ["python3", "-c", code])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("3.11.")


def test_pyc_files_are_unchecked_hash_based(rootfs: Path) -> None:
    # The fixed mtimes would make timestamp-checked .pyc files stale: Python would recompile on every start.
    pycs = [*rootfs.glob("opt/pylib/multinode/__pycache__/*.pyc"),
            *rootfs.glob("usr/lib/python3.11/__pycache__/os.*.pyc")]
    assert pycs
    for pyc in pycs:
        assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01, pyc  # hash-based, not checked


def _ctr_dir() -> Path:
    version = images.binaries.read_versions().get("CONTAINERD_VERSION", "none")
    return images.binaries.cache_dir() / "bin" / f"containerd-{version}"


@needs_root
def test_containerd_imports_the_archive(built: dict[str, images.BuiltImage], tmp_path: Path) -> None:
    # A private containerd (its own root, state and socket; no CRI plugin): not the cluster's.
    assert (_ctr_dir() / "containerd").exists(), "containerd is not built (make binaries)"
    # containerd keeps its shim sockets and fifos under /run/containerd whatever its state folder is.
    run_dir_existed = Path("/run/containerd").exists()
    sock = tmp_path / "containerd.sock"
    (tmp_path / "config.toml").write_text(f'''version = 3
root = "{tmp_path}/root"
state = "{tmp_path}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
''')
    daemon = subprocess.Popen([_ctr_dir() / "containerd", "--config", tmp_path / "config.toml"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        ctr = _ctr_dir() / "ctr"
        images.import_images(ctr, str(sock), {image.archive for image in built.values()})
        listed = subprocess.run([ctr, "--address", sock, "-n", "k8s.io", "images", "check"],
                                capture_output=True, text=True, check=True).stdout.splitlines()[1:]
        by_ref = {line.split()[0]: line.split() for line in listed}
        for ref, image in built.items():
            for name in (ref, image.digest_ref):
                assert by_ref[name][2] == image.digest_ref.partition("@")[2]  # the manifest digest
                assert by_ref[name][3] == "complete" and by_ref[name][-1] == "true"  # all blobs, unpacked
        snapshots = subprocess.run([ctr, "--address", sock, "-n", "k8s.io", "snapshots", "--snapshotter", "overlayfs",
                                    "ls"], capture_output=True, text=True, check=True).stdout.splitlines()[1:]
        # pause, base, base+pylib (the operator's, shared with the trainer), base+pylib+app (the trainer's)
        assert len(snapshots) == 4
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
        if not run_dir_existed:
            subprocess.run(["rm", "-rf", "/run/containerd"], check=True)
    assert not images._mounts_under(tmp_path)
    subprocess.run(["rm", "-rf", "--one-file-system", tmp_path], check=True)
