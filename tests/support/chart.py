"""Rendering the chart with the pinned helm, for the chart's unit and integration tests."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.support.binaries import KUBE_VERSION, pinned
from tests.support.paths import CHART_DIR


def helm(*args: str, check: bool = True, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run([pinned("helm"), *args], capture_output=True, text=True, timeout=timeout, env=env,
                            check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result


def _value_args(values: dict | None, sets: tuple[str, ...], tmp: Path) -> list[str]:
    args: list[str] = []
    if values is not None:
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["-f", str(path)]
    for s in sets:
        args += ["--set", s]
    return args


def template(*sets: str, values: dict | None = None, release: str = "mn", namespace: str = "mn-system",
             check: bool = True) -> subprocess.CompletedProcess:
    """`helm template` with --set arguments and/or a values dict."""
    with tempfile.TemporaryDirectory() as tmp:
        return helm("template", release, str(CHART_DIR), "--namespace", namespace, "--kube-version", KUBE_VERSION,
                    *_value_args(values, sets, Path(tmp)), check=check)


def render(*sets: str, values: dict | None = None, release: str = "mn", namespace: str = "mn-system") -> list[dict]:
    """The rendered objects (documents that are not empty)."""
    out = template(*sets, values=values, release=release, namespace=namespace).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict], kind: str) -> dict[str, Any]:
    (found,) = of_kind(objects, kind)
    return found
