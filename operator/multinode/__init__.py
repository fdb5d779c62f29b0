"""multinode: a Kubernetes operator for multi-node GPU training jobs."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

# The name on PyPI (`pip install multinode-operator`); the import package and the command stay `multinode`.
DISTRIBUTION = "multinode-operator"
# Neither installed nor in its source tree (a copied folder): a PEP 440 version that sorts below every release.
UNKNOWN_VERSION = "0+unknown"


def _version() -> str:
    """pyproject.toml's [project] version, as the installed distribution's metadata carries it.

    A source tree put on sys.path without being installed (PYTHONPATH=operator) has no metadata: its
    pyproject.toml is read instead, so the version still has one source.
    """
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        if not pyproject.is_file():
            return UNKNOWN_VERSION
        with open(pyproject, "rb") as f:
            project = tomllib.load(f).get("project", {})
        return str(project["version"]) if project.get("name") == DISTRIBUTION else UNKNOWN_VERSION


__version__ = _version()
