"""examples/real/ as a user applies it: its trainer image is `${MULTINODE_REGISTRY}/multinode/trainer:<version>`,
which the user's `envsubst '$MULTINODE_REGISTRY'` turns into the cluster's registry, and so does this."""

from __future__ import annotations

import string
from pathlib import Path

from localcluster.binaries import REPO_ROOT

EXAMPLE_DIR = REPO_ROOT / "examples" / "real"
REGISTRY_VARIABLE = "MULTINODE_REGISTRY"


def manifest_text(name: str, registry: str) -> str:
    """examples/real/<name> with ${MULTINODE_REGISTRY} replaced, as envsubst does (any other `$` is left)."""
    return string.Template((EXAMPLE_DIR / name).read_text()).safe_substitute({REGISTRY_VARIABLE: registry})


def write_manifests(registry: str, folder: Path) -> Path:
    """Every YAML file of examples/real/ with the registry filled in, into folder (for `kubectl apply -f`)."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in sorted(EXAMPLE_DIR.glob("*.yaml")):
        (folder / path.name).write_text(manifest_text(path.name, registry))
    return folder


def set_env(job: dict, **values: str) -> None:
    """Set env variables of a TrainingJob manifest's spec.env by name (added when missing), in place."""
    env = {e["name"]: e for e in job["spec"].setdefault("env", [])}
    for name, value in values.items():
        if name in env:
            env[name]["value"] = value
        else:
            job["spec"]["env"].append({"name": name, "value": value})
