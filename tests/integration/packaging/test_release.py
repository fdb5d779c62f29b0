"""`make release` against the local cluster's registry, the way .github/workflows/release.yml runs it against
GHCR: what lands there (the operator image by tag with gzip layers, the chart helm pulls) and what it leaves
for the workflow (the wheel and sdist, the chart package, the SBOM, release.json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from localcluster import LocalCluster, binaries, images

from tests.support.packaging import PROJECT_VERSION, SDIST_NAME, WHEEL_NAME
from tests.support.paths import REPO

CHART_PACKAGE = f"multinode-operator-{PROJECT_VERSION}.tgz"
SBOM = f"multinode-operator-{PROJECT_VERSION}.spdx.json"


def _make_release(*args: str) -> subprocess.CompletedProcess[str]:
    venv = Path(sys.prefix)  # the venv running the tests, not reinstalled (-o keeps its stamp)
    return subprocess.run(["make", "-s", "-C", str(REPO), "-o", str(venv / ".installed"), "release", f"VENV={venv}",
                           *args], capture_output=True, text=True, timeout=900, env=dict(os.environ), check=False)


@pytest.fixture(scope="module")
def released(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict]:
    """(registry, folder, release.json) of one `make release` into a path of the cluster's registry of its own
    (what `make push` put at the registry's root stays as it is)."""
    out = tmp_path_factory.mktemp("release")
    registry = f"{local_cluster.registry}/release-test"
    done = _make_release(f"REGISTRY={registry}", f"RELEASE_DIR={out / 'release'}", f"DIST={out / 'dist'}",
                         f"RELEASE_TAG=v{PROJECT_VERSION}")
    assert done.returncode == 0, done.stdout + done.stderr
    return registry, out, json.loads((out / "release" / "release.json").read_text())


def _crane(*args: str) -> str:
    return subprocess.run([str(binaries.locate().crane), *args], capture_output=True, text=True, check=True).stdout


def test_the_operator_image_lands_by_tag_with_gzip_layers(released: tuple[str, Path, dict]) -> None:
    registry, _, summary = released
    repository = f"{registry}/multinode/operator"
    assert summary["image"] == f"{repository}:{PROJECT_VERSION}"
    assert _crane("ls", repository).split() == [PROJECT_VERSION]
    assert _crane("digest", summary["image"]).strip() == summary["imageDigest"]
    manifest = json.loads(_crane("manifest", summary["image"]))
    assert {layer["mediaType"] for layer in manifest["layers"]} == {"application/vnd.oci.image.layer.v1.tar+gzip"}
    # The same image as the one the local cluster runs (same config, so same image ID), in a third of the bytes.
    local = images.build_images((images.OPERATOR,))[images.OPERATOR]
    assert manifest["config"]["digest"] == local.image_id
    local_size = sum((local.layout / "blobs/sha256" / d.removeprefix("sha256:")).stat().st_size
                     for d in json.loads(_crane("config", summary["image"]))["rootfs"]["diff_ids"])
    assert sum(layer["size"] for layer in manifest["layers"]) < local_size / 2
    # A release has the operator image only: the trainer image is the local cluster's (make push).
    trainer = subprocess.run([str(binaries.locate().crane), "ls", f"{registry}/multinode/trainer"],
                             capture_output=True, text=True, check=False)
    assert trainer.returncode != 0 and "NAME_UNKNOWN" in trainer.stderr


def test_the_chart_is_pushed_and_helm_pulls_the_package_it_left(released: tuple[str, Path, dict],
                                                                tmp_path: Path) -> None:
    registry, out, summary = released
    assert summary["chart"] == f"oci://{registry}/charts/multinode-operator"
    pulled = subprocess.run([str(binaries.locate().helm), "pull", summary["chart"], "--version", PROJECT_VERSION,
                             "--destination", str(tmp_path)], capture_output=True, text=True, check=True)
    assert f"Digest: {summary['chartDigest']}" in pulled.stderr
    package = out / "release" / CHART_PACKAGE
    assert summary["chartPackage"] == CHART_PACKAGE
    assert (tmp_path / CHART_PACKAGE).read_bytes() == package.read_bytes()  # what is pushed is what is attached
    with tarfile.open(package) as chart:
        metadata = yaml.safe_load(chart.extractfile("multinode-operator/Chart.yaml"))
    assert (metadata["version"], metadata["appVersion"]) == (PROJECT_VERSION, PROJECT_VERSION)


def test_the_sbom_lists_the_images_debian_and_python_packages(released: tuple[str, Path, dict]) -> None:
    _, out, summary = released
    assert summary["sbom"] == SBOM
    document = json.loads((out / "release" / SBOM).read_text())
    assert document["spdxVersion"] == "SPDX-2.3"
    purls = {ref["referenceLocator"].split("?")[0] for package in document["packages"]
             for ref in package.get("externalRefs", []) if ref["referenceType"] == "purl"}
    assert f"pkg:pypi/multinode-operator@{PROJECT_VERSION}" in purls
    python = {purl.split("/")[1].split("@")[0] for purl in purls if purl.startswith("pkg:pypi/")}
    assert {"kopf", "kubernetes", "pydantic", "prometheus-client", "pyyaml"} <= python
    debian = {purl.split("/")[2].split("@")[0] for purl in purls if purl.startswith("pkg:deb/debian/")}
    assert {"python3.11", "libc6", "ca-certificates"} <= debian


def test_the_wheel_and_sdist_are_built_for_pypi(released: tuple[str, Path, dict]) -> None:
    _, out, _ = released
    assert sorted(p.name for p in (out / "dist").iterdir()) == sorted([WHEEL_NAME, SDIST_NAME])


def test_a_tag_that_is_not_the_version_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    done = _make_release("REGISTRY=127.0.0.1:9", "RELEASE_TAG=v0.0.0-not-this", f"DIST={tmp_path / 'dist'}",
                         f"RELEASE_DIR={tmp_path / 'release'}")
    assert done.returncode == 2
    assert f"RELEASE_TAG 'v0.0.0-not-this' is not v{PROJECT_VERSION}" in done.stderr
    assert not (tmp_path / "dist").exists() and not (tmp_path / "release").exists()
