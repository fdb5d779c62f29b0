"""One version: pyproject.toml's [project] version is the one every artifact says; a drift fails here."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

import multinode
from multinode.cli.main import build_parser
from multinode.render import RenderSettings
from multinode.render.settings import DEFAULT_OPERATOR_IMAGE, OPERATOR_IMAGE_REPOSITORY
from tests.support.packaging import DISTRIBUTION, PROJECT_VERSION
from tests.support.paths import CHART_DIR, REPO

# Where the release pushes images: <registry>/multinode/operator and <registry>/multinode/trainer.
RELEASE_REGISTRY = "ghcr.io/multinode/"
# A reference to one of the images by tag, in any file: the tag must be the project version. The registry
# is GHCR's, or the local cluster's named by its variable (examples/real: `${MULTINODE_REGISTRY}/...`).
IMAGE_TAG = re.compile(r"(?:" + re.escape(RELEASE_REGISTRY) + r"|\$\{?MULTINODE_REGISTRY\}?/multinode/)"
                       r"([a-z0-9-]+):([0-9][\w.+-]*)")
# The chart by version, as `helm install|upgrade|pull` take it: `.../charts/multinode-operator --version X`.
CHART_VERSION = re.compile(r"charts/multinode-operator --version ([0-9][\w.+-]*)")
# What `multinode --version` prints, where a doc shows it.
VERSION_OUTPUT = re.compile(r"# multinode ([0-9]\S*)")
# The dev tool's own package version, not the operator's.
NOT_THE_OPERATOR = {"tools/localcluster/pyproject.toml"}


def test_the_distribution_is_ours_and_the_package_reports_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert DISTRIBUTION == multinode.DISTRIBUTION == "multinode-operator"
    assert multinode.__version__ == PROJECT_VERSION
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"multinode {PROJECT_VERSION}\n"


def test_the_chart_is_released_with_the_package() -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (PROJECT_VERSION, PROJECT_VERSION)
    # An empty tag makes the chart use appVersion (tests/unit/chart/test_chart.py renders that).
    image = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["image"]
    assert (image["repository"], image["tag"]) == (OPERATOR_IMAGE_REPOSITORY, "")
    readme = (CHART_DIR / "README.md").read_text()
    assert f"| `image.repository` | `{OPERATOR_IMAGE_REPOSITORY}` |" in readme
    assert '| `image.tag` | `""` | tag; empty: the chart\'s `appVersion` |' in readme


def test_the_default_operator_image_is_the_released_one() -> None:
    assert DEFAULT_OPERATOR_IMAGE == f"{RELEASE_REGISTRY}operator:{PROJECT_VERSION}"
    assert RenderSettings().operator_image == DEFAULT_OPERATOR_IMAGE


def test_every_released_image_tag_and_version_the_repository_names_is_the_project_version() -> None:
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True,
                             check=True).stdout.split("\0")
    found: dict[str, set[str]] = {}
    for name in tracked:
        path = REPO / name
        if not name or name in NOT_THE_OPERATOR or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for image, tag in IMAGE_TAG.findall(text):
            found.setdefault(name, set()).add(f"{image}:{tag}")
        for version in [*VERSION_OUTPUT.findall(text), *CHART_VERSION.findall(text)]:
            found.setdefault(name, set()).add(f"--version {version}")
    expected = {f"operator:{PROJECT_VERSION}", f"trainer:{PROJECT_VERSION}", f"--version {PROJECT_VERSION}"}
    drifted = {name: refs - expected for name, refs in found.items() if refs - expected}
    assert not drifted, f"not the project version {PROJECT_VERSION}: {drifted}"
    # The scan sees the places that name a tag today (so it is not passing on nothing).
    assert {"images/operator/Dockerfile", "images/operator/README.md", "examples/real/trainingjob.yaml",
            "README.md", "docs/quickstart.md"} <= set(found)
    assert f"trainer:{PROJECT_VERSION}" in found["examples/real/trainingjob.yaml"]
