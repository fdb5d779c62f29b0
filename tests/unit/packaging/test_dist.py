"""`make dist`: the wheel and sdist of multinode-operator pass `twine check`, the sdist holds what a build needs
and nothing else, and the wheel installed in a fresh venv answers `multinode --version`.

Offline and in seconds: the build uses the venv's setuptools, and the fresh venv borrows the dependencies of
the venv running the tests (tests/integration/packaging/test_wheel.py installs them from the index and starts
the operator from the wheel).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.support.packaging import DISTRIBUTION, PROJECT_VERSION, SDIST_NAME, WHEEL_NAME, make_dist
from tests.support.paths import REPO

PACKAGE = REPO / "operator" / "multinode"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("dist")
    return out, make_dist(out)


def test_make_dist_builds_a_wheel_and_an_sdist_that_twine_passes(dist: tuple[Path, str]) -> None:
    out, printed = dist
    assert sorted(p.name for p in out.iterdir()) == sorted([WHEEL_NAME, SDIST_NAME])
    # twine check --strict (make fails on a warning too): one PASSED a file.
    assert printed.count("PASSED") == 2, printed
    with zipfile.ZipFile(out / WHEEL_NAME) as wheel:
        metadata = Parser().parsestr(wheel.read(f"{DISTRIBUTION.replace('-', '_')}-{PROJECT_VERSION}.dist-info/"
                                                "METADATA").decode())
        packages = {name.split("/")[0] for name in wheel.namelist()}
    assert (metadata["Name"], metadata["Version"]) == (DISTRIBUTION, PROJECT_VERSION)
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert packages == {"multinode", f"{DISTRIBUTION.replace('-', '_')}-{PROJECT_VERSION}.dist-info"}


def test_the_sdist_holds_the_sources_a_build_needs_and_nothing_else(dist: tuple[Path, str]) -> None:
    out, _ = dist
    top = SDIST_NAME.removesuffix(".tar.gz")
    with tarfile.open(out / SDIST_NAME) as sdist:
        files = {m.name.removeprefix(f"{top}/") for m in sdist.getmembers() if m.isfile()}
    sources = {str(p.relative_to(REPO)) for p in PACKAGE.rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert sources <= files, f"missing from the sdist: {sorted(sources - files)}"
    # Beside the sources: the build's own metadata, the files pyproject.toml names and the license; no tests or caches.
    egg_info = f"operator/{DISTRIBUTION.replace('-', '_')}.egg-info/"
    rest = {name for name in files - sources if not name.startswith(egg_info)}
    assert rest == {"PKG-INFO", "pyproject.toml", "README.md", "LICENSE", "setup.cfg"}


def test_the_wheel_in_a_fresh_venv_answers_multinode_version(dist: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = dist
    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=False)
    python = fresh / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    "--disable-pip-version-check", str(out / WHEEL_NAME)], check=True, timeout=120)
    # The dependencies (kopf, pydantic, ...) from this venv, after the fresh venv's own site-packages: a .pth
    # line only appends its folder to sys.path, so this venv's editable install of multinode is not loaded.
    fresh_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                capture_output=True, text=True, check=True).stdout.strip()
    Path(fresh_site, "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    version = subprocess.run([str(fresh / "bin" / "multinode"), "--version"], capture_output=True, text=True,
                             timeout=60, env=env, cwd=tmp_path, check=False)
    assert version.returncode == 0, version.stderr
    assert version.stdout == f"multinode {PROJECT_VERSION}\n"
    where = subprocess.run([str(python), "-c", "import multinode; print(multinode.__file__)"], capture_output=True,
                           text=True, timeout=60, env=env, cwd=tmp_path, check=True).stdout
    assert where.startswith(fresh_site), f"multinode imported from {where}, not from the wheel"
