"""The local cluster's OCI registry: distribution's registry server on loopback, plain HTTP, its storage in
the cluster's folder. Its lifetime is the cluster's: `up` starts it, `down` stops it and removes its storage.

Real nodes' containerd pull from it through registry host configuration (`config_path`: one folder per
registry host holding a hosts.toml), the way a cluster is pointed at a private plain-HTTP registry.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

HOST = "127.0.0.1"
STORAGE_DIR = "registry"  # under the cluster's folder
CONFIG_FILE = "registry.yaml"


def address(port: int) -> str:
    return f"{HOST}:{port}"


def write_config(cluster_dir: Path, port: int) -> Path:
    """distribution's configuration: filesystem storage in the cluster's folder, HTTP on loopback, no auth."""
    config = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(cluster_dir / STORAGE_DIR)},
                    # A re-pushed tag (make push after a change) leaves the old manifest; deleting by digest
                    # is how an admin would clean it up.
                    "delete": {"enabled": True}},
        "http": {"addr": address(port)},
    }
    path = cluster_dir / CONFIG_FILE
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def args(binary: Path, config: Path) -> list[str]:
    return [str(binary), "serve", str(config)]


def wait_serving(registry: str, timeout: float, alive: Callable[[], bool]) -> None:
    """Until GET /v2/ answers 200 (the registry API's version check), or fail when the process died."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("the registry exited; see its log")
        try:
            with urllib.request.urlopen(f"http://{registry}/v2/", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as e:
            last = str(e)
        time.sleep(0.05)
    raise TimeoutError(f"registry {registry} did not answer /v2/ within {timeout}s: {last}")


def containerd_hosts(registry: str, config_path: Path) -> Path:
    """containerd's host configuration for the registry under config_path: <config_path>/<host:port>/hosts.toml
    saying to pull and resolve over plain HTTP. Returns the file."""
    folder = config_path / registry
    folder.mkdir(parents=True, exist_ok=True)
    url = json.dumps(f"http://{registry}")  # a JSON string is a TOML basic string
    lines = [f"server = {url}", "", f"[host.{url}]", '  capabilities = ["pull", "resolve"]']
    path = folder / "hosts.toml"
    path.write_text("\n".join(lines) + "\n")
    return path
