"""Small helpers the integration tests share: namespaces, kubectl, clients for other identities."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import yaml

from kubernetes import client

from tests.support.waiting import wait_for


def new_namespace(core: client.CoreV1Api, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"multinode.dev/test": "true"}}})
    # The service-account controller creates `default` a moment later; pods are refused until then.
    wait_for(lambda: _has_default_sa(core, name), timeout=30, what=f"default ServiceAccount in {name}")
    return name


def _has_default_sa(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
        return True
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise


def kubectl(kubeconfig: str, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    """Run the pinned kubectl (first on PATH under `make test`) against the test cluster."""
    env = dict(os.environ, KUBECONFIG=kubeconfig)
    result = subprocess.run(["kubectl", *args], env=env, input=input, capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


def client_for_token(admin: client.ApiClient, token: str) -> client.ApiClient:
    """An API client that talks to the same server as `admin` but authenticates with `token`."""
    cfg = client.Configuration()
    cfg.host = admin.configuration.host
    cfg.ssl_ca_cert = admin.configuration.ssl_ca_cert
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def service_account_token(core: client.CoreV1Api, namespace: str, name: str) -> str:
    request = {"spec": {"audiences": [], "expirationSeconds": 3600}}
    return core.create_namespaced_service_account_token(name, namespace, request).status.token


def kubeconfig_for_token(admin_kubeconfig: str, token: str, path: Path) -> str:
    """A kubeconfig for the same cluster as `admin_kubeconfig`, authenticating with `token`."""
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "token-user", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": admin["clusters"][0]["name"], "user": "token-user"}}],
        "current-context": "token",
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)
