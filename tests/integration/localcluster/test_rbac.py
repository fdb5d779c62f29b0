"""The apiserver really enforces RBAC, so the operator's and the chart's roles are really tested."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.support.kube import client_for_token, service_account_token


def test_service_account_without_a_role_gets_403_listing_pods(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = service_account_token(core, namespace, "nobody")
    as_nobody = client.CoreV1Api(client_for_token(api, token))

    with pytest.raises(client.ApiException) as refused:
        as_nobody.list_namespaced_pod(namespace)

    assert refused.value.status == 403
    assert f"system:serviceaccount:{namespace}:nobody" in refused.value.body
    # The same request as admin works, so the 403 is authorization, not a broken connection.
    assert core.list_namespaced_pod(namespace).items == []
