"""The package as users get it: pyproject.toml's version, and `make dist` run into a folder of the test's."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.paths import REPO


def _project() -> dict:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


# The one version every artifact carries (the chart, the image tags, `multinode --version`, the metrics).
PROJECT_VERSION: str = _project()["version"]
DISTRIBUTION: str = _project()["name"]
# PEP 427 file names: the distribution's `-` becomes `_`.
WHEEL_NAME = f"{DISTRIBUTION.replace('-', '_')}-{PROJECT_VERSION}-py3-none-any.whl"
SDIST_NAME = f"{DISTRIBUTION.replace('-', '_')}-{PROJECT_VERSION}.tar.gz"


def make_dist(out: Path) -> str:
    """`make dist` into `out`, with the venv running the tests (not reinstalled: -o keeps its stamp as it is);
    returns what it printed, colour codes removed."""
    venv = Path(sys.prefix)
    done = subprocess.run(["make", "-s", "-C", str(REPO), "-o", str(venv / ".installed"), "dist", f"VENV={venv}",
                           f"DIST={out}"], capture_output=True, text=True, timeout=300, check=False)
    output = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
    assert done.returncode == 0, output
    return output
