"""Clients and kubeconfigs for other identities (namespaces and kubectl: localcluster.harness.kube)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kubernetes import client


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
