"""The chart's admission policies on the real apiserver: what a stolen operator token, a stolen mirror token and
a tenant's TrainingJob are refused (docs/security.md).

Each escalation is tried with a real token of the release's ServiceAccount (or of a job's mirror), against the
RBAC-enforcing apiserver. Where RBAC alone would let it through, the test says so first: the policy is what
stops it. Objects the operator may create are tried as server-side dry runs (admission runs in full, nothing
is stored); a job end to end under these rules is tests/integration/chart/test_chart_install.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from multinode.api import GROUP, PLURAL, VERSION
from multinode.api.constants import (
    LABEL_ALLOW_HOST_NETWORK,
    LABEL_ALLOW_HOST_PATH,
    LABEL_ALLOW_INLINE_VOLUMES,
    LABEL_ALLOW_PRIVILEGED,
    LABEL_JOB_NAME,
    LABEL_MANAGED_BY,
    LABEL_MIRROR_OF,
    MANAGED_BY_VALUE,
)
from localcluster.harness.kube import new_namespace
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from tests.integration.chart.conftest import Release, installed_release
from tests.support.kube import client_for_token, service_account_token

PROTECTED = ("kube-system", "kube-node-lease")


@pytest.fixture(scope="module")
def policed(core: client.CoreV1Api, kubeconfig: str, crd: str) -> Iterator[Release]:
    """A release whose operator does not run: the tests act with its identity themselves."""
    with installed_release(core, kubeconfig, crd, "replicaCount=0") as release:
        yield release


@pytest.fixture(scope="module")
def as_operator(policed: Release, api: client.ApiClient, core: client.CoreV1Api) -> client.ApiClient:
    return client_for_token(api, service_account_token(core, policed.namespace, policed.fullname))


@pytest.fixture(scope="module")
def owner(policed: Release, api: client.ApiClient) -> dict[str, Any]:
    """A real TrainingJob in the jobs' namespace (no operator watches it), as the ownerReference the operator sets."""
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, policed.jobs_namespace, PLURAL, training_job("owner", 1))
    meta = created["metadata"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


@pytest.fixture
def tenant_namespace(core: client.CoreV1Api, policed: Release) -> Iterator[str]:
    """A namespace of its own: tests label it as an admin would."""
    name = new_namespace(core, prefix="ten")
    yield name
    core.delete_namespace(name)


def refused(call: Callable[[], object]) -> str:
    """The apiserver's message for a refused call (403)."""
    with pytest.raises(client.ApiException) as e:
        call()
    assert e.value.status == 403, e.value.body
    return str(json.loads(e.value.body)["message"])


def _refusal_or_none(call: Callable[[], object]) -> str | None:
    try:
        call()
    except client.ApiException as e:
        assert e.status == 403, e.body
        return str(json.loads(e.body)["message"])
    return None


def refused_once_settled(call: Callable[[], object], what: str) -> str:
    """`refused` for a call whose refusal follows a change the apiserver's admission sees through its own
    watch a moment later (a policy's new expression, a namespace's new label): the call is a dry run."""
    return wait_for(lambda: _refusal_or_none(call), timeout=30, what=what)


def admitted_once_settled(call: Callable[[], object], what: str) -> None:
    wait_for(lambda: _refusal_or_none(call) is None, timeout=30, what=what)


def job_metadata(name: str, owner: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Metadata as the operator writes it: multinode's labels, the job as controller."""
    return {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_JOB_NAME: owner["name"]},
            "ownerReferences": [owner], **extra}


# A pod Pod Security `restricted` admits, so that only the chart's policies can refuse it.
RESTRICTED_CONTAINER = {"name": "c", "image": "registry.example/x:1", "securityContext": {
    "runAsNonRoot": True, "runAsUser": 1000, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"}}}


def pod(metadata: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [RESTRICTED_CONTAINER], "automountServiceAccountToken": False, **spec}}


def mirror_binding(owner: dict[str, Any], namespace: str, role: str, subjects: list[dict]) -> dict[str, Any]:
    name = f"{owner['name']}-mirror"
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_MIRROR_OF: owner["name"]},
                         "ownerReferences": [owner]},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects}


# --- a stolen operator token ---------------------------------------------------------------------------

def test_the_operator_starts_no_pod_in_a_protected_namespace(policed: Release, as_operator: client.ApiClient,
                                                             owner: dict) -> None:
    core = client.CoreV1Api(as_operator)
    for namespace in (*PROTECTED, policed.namespace):
        assert policed.can("create", "pods", namespace), "all-namespaces RBAC grants it: the policy is what refuses"
        message = refused(lambda ns=namespace: core.create_namespaced_pod(ns, pod(job_metadata("evil", owner))))
        assert f"the multinode operator may not create pods in {namespace}, a protected namespace" in message


def test_the_operator_binds_nothing_but_a_jobs_own_mirror(policed: Release, as_operator: client.ApiClient,
                                                          owner: dict) -> None:
    rbac, ns = client.RbacAuthorizationV1Api(as_operator), policed.jobs_namespace
    everyone = [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"}]
    mirror = {"kind": "ServiceAccount", "name": "owner-mirror", "namespace": ns}

    def create(body: dict) -> Callable[[], object]:
        return lambda: rbac.create_namespaced_role_binding(ns, body, dry_run="All")

    # Its own ClusterRole, to everyone: RBAC allows it (the operator holds every right it grants).
    loose = mirror_binding(owner, ns, policed.fullname, everyone)
    loose["metadata"] = {"name": "grab"}
    assert "ValidatingAdmissionPolicy" in refused(create(loose))
    # The same, dressed as the operator's own binding: refused for its role.
    message = refused(create(mirror_binding(owner, ns, policed.fullname, everyone)))
    assert f"may bind only the ClusterRole {policed.mirror_cluster_role}" in message
    # The mirror ClusterRole, to everyone or to one more subject: refused for its subjects.
    for subjects in (everyone, [mirror, *everyone]):
        message = refused(create(mirror_binding(owner, ns, policed.mirror_cluster_role, subjects)))
        assert "to the job's own mirror, the ServiceAccount owner-mirror" in message
    # cluster-admin: RBAC refuses it first (no bind on it, and not its rights); no Roles at all.
    assert "attempting to grant RBAC permissions not currently held" in refused(
        create(mirror_binding(owner, ns, "cluster-admin", [mirror])))
    role = {"metadata": {"name": "grab"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]}
    assert "cannot create resource \"roles\"" in refused(lambda: rbac.create_namespaced_role(ns, role))
    # What the operator does make is admitted.
    create(mirror_binding(owner, ns, policed.mirror_cluster_role, [mirror]))()


def test_the_operator_touches_no_object_that_is_not_a_jobs(policed: Release, as_operator: client.ApiClient,
                                                           api: client.ApiClient, owner: dict) -> None:
    core, ns = client.CoreV1Api(as_operator), policed.jobs_namespace
    config_map = {"metadata": {"name": "loose"}, "data": {"LD_PRELOAD": "/evil.so"}}
    assert "controlled by a TrainingJob" in refused(
        lambda: core.create_namespaced_config_map(ns, config_map, dry_run="All"))
    unlabelled = {"metadata": {"name": "owned", "ownerReferences": [owner]}, "data": {}}
    assert "labelled app.kubernetes.io/managed-by=multinode" in refused(
        lambda: core.create_namespaced_config_map(ns, unlabelled, dry_run="All"))
    core.create_namespaced_config_map(ns, {"metadata": job_metadata("owner-a0", owner), "data": {}}, dry_run="All")
    # Deleting: nothing a tenant made itself.
    admin = client.CoreV1Api(api)
    admin.create_namespaced_config_map(ns, {"metadata": {"name": "tenants"}, "data": {}})
    admin.create_namespaced_pod(ns, pod({"name": "tenants"}))
    assert "may delete only configmaps controlled by a TrainingJob" in refused(
        lambda: core.delete_namespaced_config_map("tenants", ns))
    assert "may delete only pods controlled by a TrainingJob" in refused(
        lambda: core.delete_namespaced_pod("tenants", ns))


def test_the_operator_holds_evictions_only_of_its_jobs_own_node_pods(policed: Release, as_operator: client.ApiClient,
                                                                    owner: dict) -> None:
    policy, ns = client.PolicyV1Api(as_operator), policed.jobs_namespace

    def budget(selector: dict) -> Callable[[], object]:
        body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": job_metadata("owner", owner),
                "spec": {"minAvailable": 1, "selector": selector}}
        return lambda: policy.create_namespaced_pod_disruption_budget(ns, body, dry_run="All")

    assert policed.can("create", "poddisruptionbudgets.policy", ns), "RBAC grants it: the policy is what narrows it"
    node_pods = [{"key": "multinode.dev/node-index", "operator": "Exists"}]
    # Every pod of the namespace, or another job's: a drain of them would hang.
    for selector in ({}, {"matchLabels": {LABEL_JOB_NAME: "someone-else"}, "matchExpressions": node_pods},
                     {"matchLabels": {LABEL_JOB_NAME: "owner", "app": "db"}, "matchExpressions": node_pods}):
        assert "may hold evictions only of its job's node pods" in refused(budget(selector)), selector
    # What the operator does make is admitted (render/disruption_budget.py).
    budget({"matchLabels": {LABEL_JOB_NAME: "owner"}, "matchExpressions": node_pods})()


def test_the_operator_changes_nothing_of_a_pod_but_its_multinode_annotations(
        policed: Release, as_operator: client.ApiClient, api: client.ApiClient, owner: dict) -> None:
    operator, admin, ns = client.CoreV1Api(as_operator), client.CoreV1Api(api), policed.jobs_namespace
    admin.create_namespaced_pod(ns, pod(job_metadata("owner-0-a0", owner, annotations={"team": "a"})))
    admin.create_namespaced_pod(ns, pod({"name": "tenants-own"}))

    def patch(name: str, body: dict) -> Callable[[], object]:
        return lambda: operator.patch_namespaced_pod(name, ns, body, dry_run="All")

    assert policed.can("patch", "pods", ns), "RBAC grants it: the policy is what narrows it"
    # What an in-place restart writes (reconcile/in_place.py) is admitted.
    patch("owner-0-a0", {"metadata": {"annotations": {"multinode.dev/attempt": "1"}}})()
    for body in ({"metadata": {"annotations": {"team": "b"}}}, {"metadata": {"annotations": {"team": None}}}):
        assert "only the multinode.dev/ annotations" in refused(patch("owner-0-a0", body))
    assert "not its spec, labels" in refused(patch("owner-0-a0", {"metadata": {"labels": {"app": "db"}}}))
    assert "not its spec, labels" in refused(
        patch("owner-0-a0", {"spec": {"containers": [{"name": "c", "image": "registry.example/evil:1"}]}}))
    assert "only pods controlled by a TrainingJob" in refused(
        patch("tenants-own", {"metadata": {"annotations": {"multinode.dev/attempt": "1"}}}))


def test_the_operators_pods_get_no_more_than_the_namespace_allows(
        policed: Release, as_operator: client.ApiClient, core: client.CoreV1Api, owner: dict,
        tenant_namespace: str) -> None:
    operator = client.CoreV1Api(as_operator)
    ns, owned = tenant_namespace, job_metadata("owner-0-a0", owner)

    def create(**spec: Any) -> Callable[[], object]:
        return lambda: operator.create_namespaced_pod(ns, pod(owned, **spec), dry_run="All")

    host_path = [{"name": "root", "hostPath": {"path": "/"}}]
    privileged = [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]
    assert "hostPath volume root not allowed" in refused(create(volumes=host_path))
    assert "spec.hostNetwork: not allowed" in refused(create(hostNetwork=True))
    assert "spec.volumes: volume nfs has an inline source" in refused(
        create(volumes=[{"name": "nfs", "nfs": {"server": "10.0.0.1", "path": "/"}}]))
    assert "privileged, capabilities beyond baseline" in refused(create(containers=privileged))
    assert "never shares a node's process or IPC namespace" in refused(create(hostPID=True))
    # A hot spare pulls its trainer's image with the pod: an image volume of exactly that image, nothing else.
    trainer = [{**RESTRICTED_CONTAINER, "name": "trainer"}]
    image = RESTRICTED_CONTAINER["image"]
    create(containers=trainer, volumes=[{"name": "multinode-trainer-image", "image": {"reference": image}}])()
    assert "volume multinode-trainer-image has an inline source" in refused(create(
        containers=trainer, volumes=[{"name": "multinode-trainer-image", "image": {"reference": "other/x:1"}}]))
    assert "volume tools has an inline source" in refused(create(
        containers=trainer, volumes=[{"name": "tools", "image": {"reference": image}}]))
    core.patch_namespace(ns, {"metadata": {"labels": {LABEL_ALLOW_HOST_PATH: "true", LABEL_ALLOW_PRIVILEGED: "true"}}})
    # The policy reads the namespace's labels through the apiserver's own watch: admitted a moment later.
    admitted_once_settled(create(volumes=host_path), "hostPath admitted once the namespace is labelled")
    admitted_once_settled(create(containers=privileged), "privileged admitted once the namespace is labelled")
    assert "never shares" in refused(create(hostIPC=True))


# --- a stolen mirror token -------------------------------------------------------------------------------

def test_a_mirror_writes_only_its_own_jobs_status(policed: Release, api: client.ApiClient,
                                                  core: client.CoreV1Api) -> None:
    ns, custom = policed.jobs_namespace, client.CustomObjectsApi(api)
    for name in ("mine", "theirs"):
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, training_job(name, 1))
    # The identity the operator gives a mirror: its ServiceAccount, bound to the chart's ClusterRole.
    core.create_namespaced_service_account(ns, {"metadata": {"name": "mine-mirror"}})
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(ns, {
        "metadata": {"name": "mine-mirror"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": policed.mirror_cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": "mine-mirror", "namespace": ns}]})
    mirror = client.CustomObjectsApi(client_for_token(api, service_account_token(core, ns, "mine-mirror")))
    patch = {"status": {"checkpoints": {"mirrored": 9}}}
    message = refused(lambda: mirror.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "theirs", patch))
    assert f"may write only the status of the job it mirrors, not of {ns}/theirs" in message
    mirror.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "mine", {"status": {"checkpoints": {
        "mirrored": 1}}})


# --- a tenant's TrainingJob -----------------------------------------------------------------------------

HOST_ACCESS = {
    "hostPath": ({"podTemplate": {"volumes": [{"name": "torch", "hostPath": {"path": "/opt/torch"}}]}},
                 "spec.podTemplate.volumes: hostPath volume torch is not allowed", LABEL_ALLOW_HOST_PATH),
    "nfs": ({"podTemplate": {"volumes": [{"name": "data", "nfs": {"server": "10.0.0.1", "path": "/"}}]}},
            "spec.podTemplate.volumes: volume data (nfs) is an inline volume source", LABEL_ALLOW_INLINE_VOLUMES),
    "iscsi": ({"podTemplate": {"volumes": [{"name": "lun", "iscsi": {"targetPortal": "10.0.0.1", "iqn": "iqn.x",
                                                                      "lun": 0}}]}},
              "volume lun (iscsi) is an inline volume source", LABEL_ALLOW_INLINE_VOLUMES),
    "csi": ({"podTemplate": {"volumes": [{"name": "s3", "csi": {"driver": "s3.csi.example"}}]}},
            "volume s3 (csi) is an inline volume source", LABEL_ALLOW_INLINE_VOLUMES),
    "rbd": ({"podTemplate": {"volumes": [{"name": "ceph", "rbd": {"monitors": ["10.0.0.1"], "image": "x"}}]}},
            "volume ceph (rbd) is an inline volume source", LABEL_ALLOW_INLINE_VOLUMES),
    "hostNetwork": ({"network": {"hostNetwork": True}}, "spec.network.hostNetwork: not allowed",
                    LABEL_ALLOW_HOST_NETWORK),
    "privileged": ({"podTemplate": {"containerSecurityContext": {"privileged": True}}},
                   "spec.podTemplate.containerSecurityContext: privileged", LABEL_ALLOW_PRIVILEGED),
    "SYS_ADMIN": ({"podTemplate": {"containerSecurityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}},
                  "capabilities beyond Pod Security baseline", LABEL_ALLOW_PRIVILEGED),
    "Unconfined": ({"podTemplate": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}},
                   "an Unconfined seccomp or AppArmor profile", LABEL_ALLOW_PRIVILEGED),
}


def create_job(api: client.ApiClient, namespace: str, spec: dict) -> Callable[[], object]:
    return lambda: client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, training_job("tenant", 2, **spec), dry_run="All")


@pytest.mark.parametrize("asked", sorted(HOST_ACCESS))
def test_a_tenants_job_gets_no_node_access_until_an_admin_labels_the_namespace(
        asked: str, policed: Release, api: client.ApiClient, core: client.CoreV1Api, tenant_namespace: str) -> None:
    spec, reason, label = HOST_ACCESS[asked]
    message = refused(create_job(api, tenant_namespace, spec))
    assert reason in message and f"the namespace label {label}=true" in message, message
    core.patch_namespace(tenant_namespace, {"metadata": {"labels": {label: "true"}}})
    admitted_once_settled(create_job(api, tenant_namespace, spec), f"{asked} admitted once the namespace is labelled")


def test_claims_config_and_scratch_volumes_need_no_label(policed: Release, api: client.ApiClient,
                                                         tenant_namespace: str) -> None:
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
               {"name": "conf", "configMap": {"name": "conf"}}, {"name": "token", "secret": {"secretName": "t"}},
               {"name": "scratch", "emptyDir": {}}, {"name": "info", "downwardAPI": {"items": []}}]
    create_job(api, tenant_namespace, {"podTemplate": {"volumes": volumes,
                                                       "containerSecurityContext": {"capabilities": {"add": ["CHOWN"]}},
                                                       "securityContext": {"runAsNonRoot": True}},
                                       "network": {"rdma": {"count": 1}}})()


def test_no_job_runs_in_a_protected_namespace(policed: Release, api: client.ApiClient) -> None:
    for namespace in PROTECTED:
        message = refused(create_job(api, namespace, {}))
        assert f"TrainingJobs do not run in {namespace}, a protected namespace" in message


def test_without_pod_logs_hang_detection_is_refused_at_admission(policed: Release, api: client.ApiClient,
                                                                 tenant_namespace: str) -> None:
    hang = {"hangDetection": {"timeoutSeconds": 600}}
    create_job(api, tenant_namespace, hang)()
    try:
        policed.upgrade("replicaCount=0", "rbac.readPodLogs=false")
        assert not policed.can("get", "pods/log", tenant_namespace)
        message = refused_once_settled(create_job(api, tenant_namespace, hang), "hangDetection refused")
        assert "spec.hangDetection: unavailable here" in message, message
    finally:
        policed.upgrade("replicaCount=0")
    admitted_once_settled(create_job(api, tenant_namespace, hang), "hangDetection admitted again")
