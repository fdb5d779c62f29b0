"""A namespace the operator may not read does not stop it anywhere else (controller/handlers.py, watches.py).

The operator follows a namespace glob with its namespaced rights granted per namespace, as an admin who
binds a Role per team does. A matching namespace without its RoleBinding answers the first LIST of each
of the operator's watches there with 403. When kopf fed indices from those watches, kopf (1.45) held back
every event of the whole operator until they listed: no job anywhere was reconciled again. Now kopf keeps
no index, each of the operator's own watches answers for its namespace alone, and all of them (kopf's
TrainingJob watch too) keep retrying: jobs in the namespaces it may read run, and once the RoleBinding
comes that namespace's job runs too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from localcluster.harness.kube import new_namespace
from localcluster.harness.operator import OperatorProcess
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from tests.support import jobs
from tests.support.kube import kubeconfig_for_token, service_account_token

PREFIX = "wr"  # the operator's glob is wr-*; the identity's own namespace (wrsa-…) does not match it
READ = ["get", "list", "watch"]


@dataclass
class Grants:
    rbac: client.RbacAuthorizationV1Api
    namespaced_role: str
    account: dict

    def grant(self, namespace: str) -> None:
        self.rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": "multinode-operator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": self.namespaced_role},
            "subjects": [self.account]})


@pytest.fixture
def grants(core: client.CoreV1Api, api: client.ApiClient, crd: str) -> Iterator[Grants]:
    """A ServiceAccount that may read namespaces, nodes and CRDs cluster-wide, and do anything in the
    namespaces it is granted (none yet)."""
    rbac = client.RbacAuthorizationV1Api(api)
    home = new_namespace(core, prefix=f"{PREFIX}sa")
    core.create_namespaced_service_account(home, {"metadata": {"name": "operator"}})
    suffix = uuid.uuid4().hex[:8]
    cluster_role, namespaced_role = f"wr-cluster-{suffix}", f"wr-namespaced-{suffix}"
    account = {"kind": "ServiceAccount", "name": "operator", "namespace": home}
    rbac.create_cluster_role({"metadata": {"name": cluster_role}, "rules": [
        {"apiGroups": [""], "resources": ["namespaces", "nodes"], "verbs": READ},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": READ},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"], "verbs": READ}]})
    rbac.create_cluster_role_binding({
        "metadata": {"name": cluster_role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [account]})
    rbac.create_cluster_role({"metadata": {"name": namespaced_role},
                              "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
    try:
        yield Grants(rbac, namespaced_role, account)
    finally:
        rbac.delete_cluster_role_binding(cluster_role)
        rbac.delete_cluster_role(cluster_role)
        rbac.delete_cluster_role(namespaced_role)
        core.delete_namespace(home)


@pytest.fixture
def team_namespaces(core: client.CoreV1Api) -> Iterator[list[str]]:
    names = [new_namespace(core, prefix=PREFIX) for _ in range(2)]
    yield names
    for name in names:
        core.delete_namespace(name)


def test_a_namespace_the_operator_may_not_read_holds_back_no_other_and_runs_once_granted(
    core: client.CoreV1Api, api: client.ApiClient, kubeconfig: str, grants: Grants, team_namespaces: list[str],
    tmp_path: Path,
) -> None:
    granted, denied = team_namespaces
    grants.grant(granted)
    account = grants.account
    token = service_account_token(core, account["namespace"], account["name"])
    op = OperatorProcess(kubeconfig_for_token(kubeconfig, token, tmp_path / "operator.kubeconfig"), [f"{PREFIX}-*"],
                         tmp_path / "operator.log")
    op.start()
    try:
        custom = client.CustomObjectsApi(api)
        wait_for(lambda: f"watch of /api/v1/namespaces/{denied}/pods failed" in op.log_tail(400), timeout=30,
                 what=f"the operator's watches in {denied} refused (log: {op.log_path})")

        jobs.apply(kubeconfig, granted, training_job("allowed", 2))
        jobs.wait_phase(custom, granted, "allowed", "Running")
        assert sorted(p.metadata.name for p in jobs.job_pods(core, granted, "allowed")) == ["allowed-0-a0",
                                                                                            "allowed-1-a0"]

        grants.grant(denied)
        jobs.apply(kubeconfig, denied, training_job("late", 2))
        # The refused watches (ours and kopf's) retry at most 30 s apart, and nothing else waits for them.
        jobs.wait_phase(custom, denied, "late", "Running", timeout=90)
        assert sorted(p.metadata.name for p in jobs.job_pods(core, denied, "late")) == ["late-0-a0", "late-1-a0"]
    finally:
        op.stop()
