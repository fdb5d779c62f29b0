"""The Helm chart on the local cluster: install, the operator running as the chart's identity, upgrade, uninstall.

There is no operator image here (no Docker engine) and kwok runs no containers, so the chart's
Deployment only proves that the apiserver accepts it, and that its pod is admitted in a namespace that
enforces PodSecurity `restricted`. The operator itself then runs as a local process with a token of the
chart's ServiceAccount, against the RBAC-enforcing apiserver: whatever the chart's roles lack, the job
below cannot finish.

Releases come from tests/integration/chart/conftest.py (the shared CRD handed to each, and back).
"""

from __future__ import annotations

import re

from pathlib import Path

import pytest
import yaml
from kubernetes import client

from multinode.api import CRD_NAME, GROUP, PLURAL, VERSION
from multinode.render.settings import OPERATOR_IMAGE_REPOSITORY
from multinode.testing import training_job
from tests.integration.chart.conftest import IMAGE_TAG, Release, crd_object
from tests.support import jobs
from tests.support.jobs import FINISH_AFTER
from localcluster.harness.kube import kubectl
from tests.support.kube import kubeconfig_for_token, service_account_token
from localcluster.harness.operator import OperatorProcess, leader_election_env
from tests.support.storage import bound_claim
from localcluster.harness.waiting import wait_for
from tests.support.mirror import MirrorProcess, write_checkpoint
from tests.support.paths import CHART_DIR

CACHE_MOUNT, CKPT_MOUNT = "/cache", "/checkpoints"


def test_install_is_accepted_and_the_operator_pod_admitted_as_restricted(
    release: Release, api: client.ApiClient, core: client.CoreV1Api
) -> None:
    apps = client.AppsV1Api(api)
    assert "kubectl get tj" in release.install_output and f"deployment/{release.fullname}" in release.install_output

    deployment = apps.read_namespaced_deployment(release.fullname, release.namespace)
    # Two replicas, one leader (the Lease): rolling updates are safe, a drain takes one pod at a time.
    assert deployment.spec.replicas == 2 and deployment.spec.strategy.type == "RollingUpdate"
    pdb = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(release.fullname, release.namespace)
    assert pdb.spec.max_unavailable == 1
    (container,) = deployment.spec.template.spec.containers
    assert container.image == f"{OPERATOR_IMAGE_REPOSITORY}:{IMAGE_TAG}"
    # Server-side validation of the whole rendered release, once more, as a dry run.
    manifest = release.helm("get", "manifest", release.name).stdout
    kubectl(release.kubeconfig, "apply", "--dry-run=server", "-f", "-", input=manifest)

    # The ReplicaSet's pod passed PodSecurity admission in a namespace that enforces `restricted`.
    selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    pod = wait_for(lambda: next(iter(core.list_namespaced_pod(release.namespace, label_selector=selector).items), None),
                   timeout=60, what="the operator pod (admitted under PodSecurity restricted)")
    assert pod.spec.service_account_name == release.fullname
    refused = [e.message for e in core.list_namespaced_event(release.namespace).items if e.reason == "FailedCreate"]
    assert not refused, refused

    crd = crd_object(release.kubeconfig)
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == release.name
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_the_charts_identity_has_only_the_operators_rights(release: Release) -> None:
    ns = release.jobs_namespace
    for verb, resource in [("list", "trainingjobs.multinode.dev"), ("delete", "trainingjobs.multinode.dev"),
                           ("patch", "trainingjobs.multinode.dev/status"), ("create", "pods"), ("delete", "pods"),
                           ("create", "services"), ("create", "serviceaccounts"),
                           ("create", "rolebindings.rbac.authorization.k8s.io"), ("create", "events"),
                           ("get", "pods/log"),
                           # an in-place restart's annotations; the admission policy -operator-pod-updates holds
                           # it to those (tests/integration/chart/test_admission_policies.py)
                           ("patch", "pods"),
                           *((v, "podgroups.scheduling.k8s.io") for v in ("list", "watch", "create", "delete")),
                           ("patch", "trainingjobs.multinode.dev"),
                           *((v, "workloads.kueue.x-k8s.io") for v in ("list", "watch", "create", "delete")),
                           ("patch", "workloads.kueue.x-k8s.io/status"),
                           # whose an object is, after its create got 409 (controller/ownership.py)
                           *(("get", r) for r in ("pods", "services", "configmaps", "serviceaccounts",
                                                  "rolebindings.rbac.authorization.k8s.io",
                                                  "podgroups.scheduling.k8s.io", "podgroups.scheduling.x-k8s.io",
                                                  "podgroups.scheduling.volcano.sh", "workloads.kueue.x-k8s.io"))]:
        assert release.can(verb, resource, ns), (verb, resource)
    assert release.can("watch", "nodes")
    assert release.can("watch", "resourceflavors.kueue.x-k8s.io")
    assert release.can("get", "priorityclasses.scheduling.k8s.io")
    # It hands out no right but the mirror's: no Roles, and bind of the mirror ClusterRole alone.
    assert can_on_named(release, "bind", f"clusterroles.rbac.authorization.k8s.io/{release.mirror_cluster_role}", ns)
    assert not can_on_named(release, "bind", "clusterroles.rbac.authorization.k8s.io/cluster-admin", ns)
    assert not can_on_named(release, "bind", f"clusterroles.rbac.authorization.k8s.io/{release.fullname}", ns)
    for verb, resource in [("get", "secrets"), ("list", "secrets"), ("list", "configmaps"), ("watch", "configmaps"),
                           ("update", "configmaps"), ("update", "trainingjobs.multinode.dev"),
                           ("get", "trainingjobs.multinode.dev"), ("update", "trainingjobs.multinode.dev/status"),
                           ("get", "trainingjobs.multinode.dev/status"), ("create", "roles.rbac.authorization.k8s.io"),
                           ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
                           ("update", "pods"), ("delete", "services"), ("get", "nodes"),
                           ("list", "namespaces"), ("create", "clusterroles.rbac.authorization.k8s.io"),
                           ("escalate", "roles.rbac.authorization.k8s.io"), ("bind", "roles.rbac.authorization.k8s.io"),
                           ("update", "deployments.apps"), ("patch", "podgroups.scheduling.k8s.io"),
                           ("update", "podgroups.scheduling.k8s.io/status"), ("create", "workloads.scheduling.k8s.io"),
                           ("update", "workloads.kueue.x-k8s.io/status"), ("patch", "workloads.kueue.x-k8s.io")]:
        assert not release.can(verb, resource, ns), (verb, resource)
    # The leader election Lease: created, read and renewed in the release namespace, its own name only.
    lease = f"leases.coordination.k8s.io/{release.fullname}"
    assert release.can("create", "leases.coordination.k8s.io", release.namespace)
    for verb in ("get", "update"):
        assert can_on_named(release, verb, lease, release.namespace), verb
        assert not can_on_named(release, verb, "leases.coordination.k8s.io/kube-scheduler", release.namespace), verb
    assert not release.can("create", "leases.coordination.k8s.io", ns)
    assert not release.can("delete", "leases.coordination.k8s.io", release.namespace)
    # The kubelets' Leases (jobs with hot spares): listed, never written, and no other namespace's.
    assert release.can("list", "leases.coordination.k8s.io", "kube-node-lease")
    for verb in ("update", "patch", "delete", "create", "watch"):
        assert not release.can(verb, "leases.coordination.k8s.io", "kube-node-lease"), verb
    assert not release.can("list", "leases.coordination.k8s.io", ns)


def can_on_named(release: Release, verb: str, resource_and_name: str, namespace: str) -> bool:
    out = kubectl(release.kubeconfig, "auth", "can-i", verb, resource_and_name, "-n", namespace,
                  f"--as={release.service_account}", check=False).stdout.strip()
    assert out in ("yes", "no"), out
    return out == "yes"


def run_operator_as_chart(release: Release, core: client.CoreV1Api, tmp_path: Path, log: str) -> OperatorProcess:
    token = service_account_token(core, release.namespace, release.fullname)
    kubeconfig = kubeconfig_for_token(release.kubeconfig, token, tmp_path / f"{log}.kubeconfig")
    # With leader election as the chart configures it: the Lease in the release namespace, under the chart's Role.
    # Mirrors are bound to the release's ClusterRole, as the chart's Deployment tells the operator.
    env = {"MULTINODE_OPERATOR_IMAGE": f"{OPERATOR_IMAGE_REPOSITORY}:{IMAGE_TAG}",
           "MULTINODE_MIRROR_CLUSTER_ROLE": release.mirror_cluster_role,
           **leader_election_env(release.namespace, log, lease=release.fullname)}
    op = OperatorProcess(kubeconfig, [release.jobs_namespace], tmp_path / f"{log}.log", extra_env=env)
    op.start()
    wait_for(op.leading, timeout=30, what=f"{log} holding the Lease (log: {op.log_path})")
    return op


# An HTTP 403 as a log line shows it ("(403)", "status 403", "403 Forbidden"), never the milliseconds of a
# timestamp (",403"), a resourceVersion or part of a generated name.
REFUSAL = re.compile(r"(?<![\w,.:-])403(?!\w)")


def assert_never_refused(op: OperatorProcess) -> None:
    text = op.log_path.read_text()
    assert not REFUSAL.search(text) and "forbidden" not in text.lower(), op.log_tail(80)


def checkpointed_job(release: Release, core: client.CoreV1Api, custom: client.CustomObjectsApi,
                     tmp_path: Path) -> dict:
    """A 4-node checkpointed job from apply to Succeeded, its mirror reporting with its own identity."""
    ns = release.jobs_namespace
    release.pvs += [bound_claim(core, ns, "team-cache"), bound_claim(core, ns, "ckpt-backup")]
    jobs.apply(release.kubeconfig, ns, training_job(
        "ckpt", 4, gpus=0, cache={"claimName": "team-cache", "mountPath": CACHE_MOUNT},
        checkpointing={"claimName": "ckpt-backup", "mountPath": CKPT_MOUNT, "keep": 2}))
    jobs.wait_phase(custom, ns, "ckpt", "Running", timeout=90)
    wait_for(lambda: any(p.metadata.name == "ckpt-mirror" for p in core.list_namespaced_pod(ns).items),
             timeout=30, what="the mirror pod")
    # The mirror's identity: a ServiceAccount, and a RoleBinding to the chart's mirror ClusterRole, which the
    # operator created under the chart's rights and admission policies.
    binding = client.RbacAuthorizationV1Api(core.api_client).read_namespaced_role_binding("ckpt-mirror", ns)
    assert binding.role_ref.kind == "ClusterRole" and binding.role_ref.name == release.mirror_cluster_role
    mirror_token = service_account_token(core, ns, "ckpt-mirror")
    source, dest = tmp_path / "cache" / "ckpt", tmp_path / "checkpoints" / "ckpt"
    source.mkdir(parents=True)
    mirror = MirrorProcess(kubeconfig_for_token(release.kubeconfig, mirror_token, tmp_path / "mirror.kubeconfig"),
                           ns, "ckpt", source, dest, tmp_path / "mirror.log")
    try:
        write_checkpoint(source, "checkpoint_0000100")
        wait_for(lambda: ((jobs.get_job(custom, ns, "ckpt").get("status") or {}).get("checkpoints") or {})
                 .get("latest", {}).get("name") == "checkpoint_0000100", timeout=30, what="the mirror's report")
        write_checkpoint(source, "checkpoint_0000200")
        for i in range(4):
            core.patch_namespaced_pod(f"ckpt-{i}-a0", ns, {"metadata": {"annotations": {FINISH_AFTER: "0s"}}})
        done = jobs.wait_phase(custom, ns, "ckpt", "Succeeded", timeout=90)
        assert mirror.proc.wait(timeout=30) == 0, mirror.log.read_text()
    finally:
        mirror.stop()
    synced = jobs.condition(done, "CheckpointsSynced")
    assert (synced["status"], synced["reason"]) == ("True", "FinalSyncDone")
    assert done["status"]["checkpoints"]["latest"]["name"] == "checkpoint_0000200"
    assert sorted(p.name for p in dest.iterdir() if not p.name.startswith(".")) == \
        ["checkpoint_0000100", "checkpoint_0000200"]
    return done


def test_operator_as_the_charts_identity_then_upgrade_and_uninstall(
    release: Release, api: client.ApiClient, core: client.CoreV1Api, tmp_path: Path
) -> None:
    custom, apps, rbac = client.CustomObjectsApi(api), client.AppsV1Api(api), client.RbacAuthorizationV1Api(api)
    ns, kubeconfig = release.jobs_namespace, release.kubeconfig
    # Only the local process below may act: the Deployment's (kwok) pod goes first.
    kubectl(kubeconfig, "scale", "-n", release.namespace, f"deployment/{release.fullname}", "--replicas=0")
    wait_for(lambda: not core.list_namespaced_pod(release.namespace).items, timeout=60, what="operator pod gone")

    # 1. All-namespaces RBAC (ClusterRole): a 4-node checkpointed job, with its mirror, to Succeeded.
    op = run_operator_as_chart(release, core, tmp_path, "operator-cluster")
    try:
        first = checkpointed_job(release, core, custom, tmp_path)
        # Ganged by a native PodGroup the chart's identity created (and watched).
        assert first["status"]["scheduling"]["gang"] == "PodGroup"
        assert_never_refused(op)
    finally:
        op.stop()

    # 2. helm upgrade: watch only the jobs' namespace (Role there, node-only ClusterRole), a new label.
    out = release.helm("upgrade", release.name, str(CHART_DIR), "--set", f"image.tag={IMAGE_TAG}",
                       "--set", f"watchNamespaces={{{ns}}}", "--set", "commonLabels.stage=upgraded",
                       "--set", "replicaCount=0").stdout
    assert "STATUS: deployed" in out and "REVISION: 2" in out
    crd = crd_object(kubeconfig)
    assert crd["metadata"]["labels"]["stage"] == "upgraded", "helm upgrade updates the CRD"
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    survivor = jobs.get_job(custom, ns, "ckpt")
    assert survivor["metadata"]["uid"] == first["metadata"]["uid"] and survivor["status"]["phase"] == "Succeeded"
    cluster_role = rbac.read_cluster_role(release.fullname)
    # Only the cluster-scoped rules: nodes, and Kueue's flavors and the PriorityClasses its Workloads need. The
    # namespace's Role holds bind of the mirror ClusterRole there.
    assert can_on_named(release, "bind", f"clusterroles.rbac.authorization.k8s.io/{release.mirror_cluster_role}", ns)
    assert not can_on_named(release, "bind", f"clusterroles.rbac.authorization.k8s.io/{release.mirror_cluster_role}",
                            "default")
    assert [(r.resources, r.verbs) for r in cluster_role.rules] == [
        (["nodes"], ["list", "watch"]), (["resourceflavors"], ["list", "watch"]), (["priorityclasses"], ["get"])]
    assert rbac.read_namespaced_role(release.fullname, ns).metadata.labels["stage"] == "upgraded"
    assert release.can("create", "pods", ns) and not release.can("create", "pods", "default")
    args = apps.read_namespaced_deployment(release.fullname, release.namespace).spec.template.spec.containers[0].args
    assert f"--namespace={ns}" in args

    # With the namespaced Role: a job that the operator deletes itself once done (ttlSecondsAfterFinished).
    op = run_operator_as_chart(release, core, tmp_path, "operator-namespaced")
    try:
        jobs.apply(kubeconfig, ns, training_job("brief", 2, gpus=0, ttlSecondsAfterFinished=0))
        jobs.wait_phase(custom, ns, "brief", "Running", timeout=90)
        for i in range(2):
            core.patch_namespaced_pod(f"brief-{i}-a0", ns, {"metadata": {"annotations": {FINISH_AFTER: "0s"}}})

        wait_for(lambda: jobs.job_gone(custom, ns, "brief"), timeout=90,
                 what="the TTL deletion of job brief by the operator")
        assert_never_refused(op)
    finally:
        op.stop()

    # 3. helm uninstall: the operator's objects go; the CRD and the TrainingJobs stay (keep policy).
    manifest = list(yaml.safe_load_all(release.helm("get", "manifest", release.name).stdout))
    (crd_doc,) = [d for d in manifest if d and d["kind"] == "CustomResourceDefinition"]
    assert crd_doc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep", \
        "refusing to uninstall: the shared CRD (and every test's jobs) would be deleted"
    out = release.helm("uninstall", release.name, "--wait").stdout
    release.installed = False
    assert "kept due to the resource policy" in out and CRD_NAME in out
    # The mirrors' ClusterRole and its policy stay with the CRD: the kept jobs' mirrors go on reporting.
    assert release.mirror_cluster_role in out
    assert rbac.read_cluster_role(release.mirror_cluster_role).rules[0].resources == ["trainingjobs/status"]

    gone = {
        "Deployment": lambda: apps.read_namespaced_deployment(release.fullname, release.namespace),
        "ServiceAccount": lambda: core.read_namespaced_service_account(release.fullname, release.namespace),
        "Service": lambda: core.read_namespaced_service(f"{release.fullname}-metrics", release.namespace),
        "ClusterRole": lambda: rbac.read_cluster_role(release.fullname),
        "ClusterRoleBinding": lambda: rbac.read_cluster_role_binding(release.fullname),
        "Role": lambda: rbac.read_namespaced_role(release.fullname, ns),
        "RoleBinding": lambda: rbac.read_namespaced_role_binding(release.fullname, ns),
        "leader election Role": lambda: rbac.read_namespaced_role(f"{release.fullname}-leader-election",
                                                                  release.namespace),
        "leader election RoleBinding": lambda: rbac.read_namespaced_role_binding(
            f"{release.fullname}-leader-election", release.namespace),
    }
    for kind, read in gone.items():
        with pytest.raises(client.ApiException) as e:
            read()
        assert e.value.status == 404, kind
    crd = crd_object(kubeconfig)
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    kept = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "ckpt")
    assert kept["metadata"]["uid"] == first["metadata"]["uid"] and kept["status"]["phase"] == "Succeeded"

    # 4. Reinstalling under the same name and namespace adopts the kept CRD with no manual step.
    release.helm("install", release.name, str(CHART_DIR), "--set", f"image.tag={IMAGE_TAG}", "--set", "replicaCount=0")
    release.installed = True
    assert crd_object(kubeconfig)["metadata"]["uid"] == crd["metadata"]["uid"]
    assert "kept due to the resource policy" in release.helm("uninstall", release.name, "--wait").stdout
    release.installed = False
    assert custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "ckpt")["metadata"]["uid"] == \
        first["metadata"]["uid"]
