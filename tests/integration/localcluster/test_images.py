"""The container images: deterministic layers, well-formed OCI layouts (plain and gzip), images that run.

No cluster is needed. The images come from the cache of `python -m localcluster images` (the first run
debootstraps the base, a few minutes, as root); the checks that run the images use chroot, as root.
tests/integration/localcluster/test_registry.py pushes them to the cluster's registry and pulls them with containerd.
"""

from __future__ import annotations

import gzip
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
    return images.build_images()


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


def test_each_layout_is_one_image_whose_blobs_are_its_digests(built: dict[str, images.BuiltImage]) -> None:
    assert set(built) == {images.PAUSE, images.OPERATOR, images.TRAINER}
    for name, image in built.items():
        assert json.loads((image.layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
        [entry] = json.loads((image.layout / "index.json").read_text())["manifests"]  # what `crane push` takes
        assert entry["digest"] == image.manifest_digest and entry["platform"] == {"architecture": "amd64",
                                                                                  "os": "linux"}
        manifest_bytes = _read_blob(image, image.manifest_digest)
        assert _sha256(manifest_bytes) == image.manifest_digest and entry["size"] == len(manifest_bytes)
        manifest = json.loads(manifest_bytes)
        config_bytes = _read_blob(image, image.image_id)
        assert manifest["config"] == {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": image.image_id, "size": len(config_bytes)}
        config = json.loads(config_bytes)
        assert (config["architecture"], config["os"]) == ("amd64", "linux")
        layers = images.image_definition(name).layers
        assert config["rootfs"] == {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]}
        for descriptor, layer in zip(manifest["layers"], layers, strict=True):
            # Uncompressed: the blob is the layer tar itself, hard-linked (a layout copies nothing).
            assert descriptor == {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer.diff_id,
                                  "size": layer.tar.stat().st_size}
            assert (image.layout / _blob(layer.diff_id)).stat().st_ino == layer.tar.stat().st_ino

    operator = _config(built[images.OPERATOR])
    assert operator["config"]["User"] == "65532:65532"
    assert (operator["config"]["Entrypoint"], operator["config"]["Cmd"]) == (["multinode"], ["operator"])
    # The trainer is the operator's base and pylib layers (a node pulls and stores them once) plus /app/train.py.
    trainer = _config(built[images.TRAINER])
    assert trainer["rootfs"]["diff_ids"][:2] == operator["rootfs"]["diff_ids"]
    assert len(trainer["rootfs"]["diff_ids"]) == 3 and trainer["config"]["WorkingDir"] == "/app"
    assert _config(built[images.PAUSE])["config"]["Entrypoint"] == ["/pause"]


@needs_root
def test_a_compressed_layout_has_reproducible_gzip_layers_of_the_same_image(
        built: dict[str, images.BuiltImage]) -> None:
    plain = built[images.OPERATOR]
    gzipped = images.build_images((images.OPERATOR,), compressed=True)[images.OPERATOR]
    assert gzipped.image_id == plain.image_id  # the same config, so the same image: only the blobs differ
    assert gzipped.manifest_digest != plain.manifest_digest
    for descriptor, diff_id in zip(_manifest(gzipped)["layers"], _config(plain)["rootfs"]["diff_ids"], strict=True):
        assert descriptor["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
        blob = gzipped.layout / _blob(descriptor["digest"])
        assert blob.stat().st_size == descriptor["size"] < (plain.layout / _blob(diff_id)).stat().st_size
        with open(blob, "rb") as f:
            header = f.read(10)
            f.seek(0)
            unpacked = hashlib.file_digest(gzip.GzipFile(fileobj=f), "sha256")
        # No file name (flag bit 3) and no time in the header: the same tar always gives the same digest.
        assert header[:3] == b"\x1f\x8b\x08" and not header[3] & 0x08 and header[4:8] == b"\0\0\0\0"
        assert "sha256:" + unpacked.hexdigest() == diff_id


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _blob(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def _read_blob(image: images.BuiltImage, digest: str) -> bytes:
    return (image.layout / _blob(digest)).read_bytes()


def _config(image: images.BuiltImage) -> dict:
    return json.loads(_read_blob(image, image.image_id))


def _manifest(image: images.BuiltImage) -> dict:
    return json.loads(_read_blob(image, image.manifest_digest))


def test_a_warm_build_repacks_nothing(built: dict[str, images.BuiltImage]) -> None:
    written = {name: (image.layout / "index.json").stat().st_mtime_ns for name, image in built.items()}
    started = time.monotonic()
    assert images.build_images() == built
    assert time.monotonic() - started < 5
    assert {name: (image.layout / "index.json").stat().st_mtime_ns for name, image in built.items()} == written


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
    operator = built[images.OPERATOR]
    for layer in _manifest(operator)["layers"]:
        subprocess.run(["tar", "-x", "--numeric-owner", "-C", root, "-f", operator.layout / _blob(layer["digest"])],
                       check=True)
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
    done = _run(rootfs, built[images.OPERATOR], ["--version"])
    assert done.returncode == 0, done.stderr
    assert f"multinode {PROJECT_VERSION}" in done.stdout + done.stderr


@needs_root
def test_the_trainer_image_imports_multinode(rootfs: Path, built: dict[str, images.BuiltImage]) -> None:
    code = ("import sys, multinode, kopf, kubernetes, pydantic, prometheus_client, yaml; "
            "assert multinode.__file__.startswith('/opt/pylib/'), multinode.__file__; print(sys.version)")
    done = _run(rootfs, built[images.TRAINER], ["python3", "-c", code])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("3.11.")


def test_pyc_files_are_unchecked_hash_based(rootfs: Path) -> None:
    # The fixed mtimes would make timestamp-checked .pyc files stale: Python would recompile on every start.
    pycs = [*rootfs.glob("opt/pylib/multinode/__pycache__/*.pyc"),
            *rootfs.glob("usr/lib/python3.11/__pycache__/os.*.pyc")]
    assert pycs
    for pyc in pycs:
        assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01, pyc  # hash-based, not checked
