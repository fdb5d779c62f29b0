"""Kubeconfig files for the local cluster: the admin's, a ServiceAccount's, each host component's."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_kubeconfig(path: Path, server: str, ca: Path, user: str, token: str, namespace: str | None = None) -> Path:
    """A kubeconfig that authenticates to `server` (trusting `ca`) with a bearer token; mode 0600."""
    context: dict = {"cluster": "multinode-local", "user": user}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "multinode-local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "multinode-local", "context": context}],
        "current-context": "multinode-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
