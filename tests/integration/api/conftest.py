"""Fixtures for the admission tests: the CRD, one namespace per module, a custom-objects client.

No operator runs here: admission is the apiserver's job (OpenAPI schema and CEL rules).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from localcluster.harness.kube import new_namespace


@pytest.fixture(scope="module")
def custom(api: client.ApiClient, crd: str) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture(scope="module")
def admission_namespace(core: client.CoreV1Api, crd: str) -> Iterator[str]:
    # Prefix "adm", not "t": no operator watches these namespaces.
    name = new_namespace(core, prefix="adm")
    yield name
    core.delete_namespace(name)
