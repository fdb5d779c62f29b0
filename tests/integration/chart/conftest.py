"""Releases of the chart on the session's cluster, each with its own operator and jobs namespaces.

The CRD is cluster-wide and shared with the other tests. A release adopts the one already applied (the way
docs/install.md describes for a CRD first installed with kubectl), helm upgrades it, and the keep policy makes
`helm uninstall` leave it; the CRD is given back without helm's ownership metadata. The release's admission
policies are cluster-wide too: after an uninstall the fixture waits until the apiserver enforces them no
more, so no later test meets them.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client, config

from multinode.api import CRD_NAME, GROUP, PLURAL, VERSION
from multinode.api.crd import render_crd_yaml
from localcluster.harness.kube import kubectl, new_namespace
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from tests.support.paths import CHART_DIR
from tests.support.chart import helm

IMAGE_TAG = "0.0.0-test"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
               "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of", "stage")
HELM_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace", "helm.sh/resource-policy")
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}


@dataclass
class Release:
    name: str
    namespace: str  # the operator's namespace (PodSecurity restricted)
    jobs_namespace: str  # not watched by the session operator (t-*)
    kubeconfig: str
    install_output: str = ""
    installed: bool = True
    pvs: list[str] = field(default_factory=list)

    @property
    def fullname(self) -> str:
        return f"{self.name}-multinode-operator"

    @property
    def service_account(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.fullname}"

    @property
    def mirror_cluster_role(self) -> str:
        return f"{self.fullname}-mirror"

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return helm(*args, "--namespace", self.namespace, "--kubeconfig", self.kubeconfig, check=check)

    def upgrade(self, *sets: str) -> str:
        """helm upgrade with the test image and `sets`; the release's admission policies follow at once."""
        args = [a for s in (f"image.tag={IMAGE_TAG}", *sets) for a in ("--set", s)]
        out = self.helm("upgrade", self.name, str(CHART_DIR), *args).stdout
        wait_policies_settled(self.kubeconfig)
        return out

    def can(self, verb: str, resource: str, namespace: str | None = None) -> bool:
        """Whether the chart's identity may `verb` `resource` ("plural.group/subresource"). A SubjectAccessReview
        of its own: `kubectl auth can-i` answers no for a group the apiserver does not serve (Kueue's here),
        while RBAC grants it all the same."""
        resource, _, sub = resource.partition("/")
        plural, _, group = resource.partition(".")
        attributes = client.V1ResourceAttributes(verb=verb, resource=plural, group=group, subresource=sub or None,
                                                 namespace=namespace)
        review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=self.service_account, groups=["system:serviceaccounts", f"system:serviceaccounts:{self.namespace}",
                                               "system:authenticated"], resource_attributes=attributes))
        with config.new_client_from_config(config_file=self.kubeconfig) as api:
            return bool(client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed)


def crd_object(kubeconfig: str) -> dict:
    return json.loads(kubectl(kubeconfig, "get", "crd", CRD_NAME, "-o", "json").stdout)


def hand_crd_to(kubeconfig: str, release: str | None, namespace: str | None) -> None:
    """Give the shared CRD to a release (helm adopts an object carrying its ownership metadata), or back."""
    if release is None:
        kubectl(kubeconfig, "label", "crd", CRD_NAME, *(f"{k}-" for k in HELM_LABELS), check=False)
        kubectl(kubeconfig, "annotate", "crd", CRD_NAME, *(f"{k}-" for k in HELM_ANNOTATIONS), check=False)
        return
    kubectl(kubeconfig, "label", "crd", CRD_NAME, "--overwrite", "app.kubernetes.io/managed-by=Helm")
    kubectl(kubeconfig, "annotate", "crd", CRD_NAME, "--overwrite",
            f"meta.helm.sh/release-name={release}", f"meta.helm.sh/release-namespace={namespace}")


# A TrainingJob every release's policy refuses (hostPath in a namespace without the label) and nothing else does.
PROBE_JOB = training_job("policy-probe", 1, podTemplate={"volumes": [{"name": "host", "hostPath": {"path": "/"}}]})


def _probe_admitted(kubeconfig: str) -> bool:
    with config.new_client_from_config(config_file=kubeconfig) as api:
        try:
            client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, PROBE_JOB,
                                                                         dry_run="All")
        except client.ApiException as e:
            if e.status == 403 and "ValidatingAdmissionPolicy" in (e.body or ""):
                return False
            raise
    return True


def wait_policies_settled(kubeconfig: str, *, enforced: bool | None = None) -> None:
    """Until the apiserver's admission matches the policies that exist: a policy's create or delete reaches
    admission through the apiserver's own watch, a moment later. `enforced` (True: a release's TrainingJob
    policy is installed, False: none is) is what the probe job must meet; None: whatever the objects say."""
    if enforced is None:
        with config.new_client_from_config(config_file=kubeconfig) as api:
            names = [p.metadata.name for p in client.AdmissionregistrationV1Api(api)
                     .list_validating_admission_policy().items]
        enforced = any(n.endswith("-multinode-operator-trainingjobs") for n in names)
    wait_for(lambda: _probe_admitted(kubeconfig) is not enforced, timeout=30,
             what=f"the apiserver {'enforcing' if enforced else 'no longer enforcing'} the TrainingJob policy")


def remove_kept_mirror_objects(kubeconfig: str, release: Release) -> None:
    """What `helm uninstall` keeps with the CRD besides it (templates/mirror-rbac.yaml)."""
    name = release.mirror_cluster_role
    kubectl(kubeconfig, "delete", "--ignore-not-found", f"clusterrole/{name}", f"validatingadmissionpolicy/{name}",
            f"validatingadmissionpolicybinding/{name}")


@contextlib.contextmanager
def installed_release(core: client.CoreV1Api, kubeconfig: str, crd: str, *sets: str) -> Iterator[Release]:
    chart_crd = (CHART_DIR / "files" / "crd.yaml").read_text()
    assert chart_crd == Path(crd).read_text() == render_crd_yaml(), \
        "the chart's CRD differs from the generated one (run `make crds`); installing it would change the shared CRD"
    ops_ns = new_namespace(core, prefix="mno")
    core.patch_namespace(ops_ns, {"metadata": {"labels": RESTRICTED}})
    jobs_ns = new_namespace(core, prefix="cj")
    rel = Release(name=f"mn{uuid.uuid4().hex[:6]}", namespace=ops_ns, jobs_namespace=jobs_ns, kubeconfig=kubeconfig)
    install = ("install", rel.name, str(CHART_DIR), "--set", f"image.tag={IMAGE_TAG}", "--set", "operator.workers=4",
               *(a for s in sets for a in ("--set", s)))
    try:
        # The CRD exists (applied with kubectl): helm refuses it until it carries the release's metadata.
        refused = rel.helm(*install, check=False)
        assert refused.returncode != 0 and "cannot be imported into the current release" in refused.stderr, refused
        hand_crd_to(kubeconfig, rel.name, ops_ns)
        rel.install_output = rel.helm(*install).stdout
        wait_policies_settled(kubeconfig)
        yield rel
    finally:
        if rel.installed:
            rel.helm("uninstall", rel.name, "--wait", check=False)
        hand_crd_to(kubeconfig, None, None)
        remove_kept_mirror_objects(kubeconfig, rel)
        for ns in (jobs_ns, ops_ns):
            core.delete_namespace(ns)
        for pv in rel.pvs:
            core.delete_persistent_volume(pv)
        wait_policies_settled(kubeconfig, enforced=False)


@pytest.fixture
def release(core: client.CoreV1Api, kubeconfig: str, crd: str) -> Iterator[Release]:
    """A release of each test's own: the lifecycle test upgrades and uninstalls it, so a shared one would
    make the other tests depend on running before it."""
    with installed_release(core, kubeconfig, crd) as rel:
        yield rel
