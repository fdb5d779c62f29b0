"""Namespaces and kubectl against the local cluster."""

from __future__ import annotations

import os
import subprocess
import uuid

from kubernetes import client

from localcluster.harness.waiting import wait_for
from multinode.api.constants import LABEL_ALLOW_HOST_PATH


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
    result = subprocess.run(["kubectl", *args], env=env, input=input, capture_output=True, text=True, timeout=120,
                            check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


def allow_host_path(core: client.CoreV1Api, namespace: str) -> None:
    """Let `namespace`'s TrainingJobs mount hostPath volumes, as the cluster's admin would: the chart's admission
    policy refuses them elsewhere (docs/security.md). The local real-node jobs mount torch from the host
    (localcluster/trainerenv.py, examples/real/)."""
    core.patch_namespace(namespace, {"metadata": {"labels": {LABEL_ALLOW_HOST_PATH: "true"}}})
