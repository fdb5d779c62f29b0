"""An operator killed in the middle of creating a gang converges, after restart, to exactly N pods."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client

from multinode.api import LABEL_NODE_INDEX
from multinode.api.conditions import Reason
from multinode.testing import training_job
from tests.support import jobs
from localcluster.harness.kube import new_namespace
from localcluster.harness.operator import OperatorProcess
from localcluster.harness.waiting import wait_for
from localcluster import LocalCluster
from tests.support.nodepools import on_pool, own_pool

NUM_NODES = 100
HELD_FROM = 10  # the first operator makes pods 0-9 only (_pods_refused_from_index)


@pytest.fixture
def own_namespace(core: client.CoreV1Api, crd: str) -> Iterator[str]:
    # Not watched by the session operator (it watches t-*): this test owns the only operator here.
    name = new_namespace(core, prefix="restart")
    yield name
    core.delete_namespace(name)


def test_operator_sigkilled_mid_creation_leaves_exactly_n_pods(
    local_cluster: LocalCluster, core: client.CoreV1Api, api: client.ApiClient, kubeconfig: str,
    own_namespace: str, tmp_path: Path
) -> None:
    # One pod per node: the job gets a fake node for each of its pods, of a pool of its own.
    with own_pool(local_cluster, core, "restart", count=NUM_NODES) as pool:
        _kill_mid_creation_then_converge(core, api, kubeconfig, own_namespace, tmp_path, pool.prefix)


def _kill_mid_creation_then_converge(core: client.CoreV1Api, api: client.ApiClient, kubeconfig: str, ns: str,
                                     tmp_path: Path, pool: str) -> None:
    custom = client.CustomObjectsApi(api)
    admission = client.AdmissionregistrationV1Api(api)
    # The apiserver refuses (403) this namespace's pods from index HELD_FROM on, so the first operator is killed
    # with exactly HELD_FROM of the pods made, however fast it creates (racing a kill against the creates once
    # found all 100 made first, seed 1811090283). A 403 is a refusal the cluster may lift: the job says so and
    # its creates are retried.
    with _pods_refused_from_index(admission, core, ns, HELD_FROM):
        first = OperatorProcess(kubeconfig, [ns], tmp_path / "first.log")
        first.start()
        try:
            # A CPU job: 100 pods fit the fake nodes without GPUs, so all of them can run.
            jobs.apply(kubeconfig, ns, training_job("big", NUM_NODES, gpus=0,
                                                    podTemplate=on_pool(pool)))
            wait_for(lambda: _refusal_said(custom, ns, "big"), timeout=60,
                     what="the job saying its pods' creation was refused")
            first.kill()
        finally:
            first.stop()
        created_before_kill = len(jobs.job_pods(core, ns, "big"))
    assert created_before_kill == HELD_FROM, created_before_kill

    second = OperatorProcess(kubeconfig, [ns], tmp_path / "second.log")
    second.start()
    try:
        jobs.wait_phase(custom, ns, "big", "Running", timeout=120)
        pods = jobs.job_pods(core, ns, "big")
    finally:
        second.stop()

    indices = Counter(int(p.metadata.labels[LABEL_NODE_INDEX]) for p in pods)
    assert len(pods) == NUM_NODES
    assert sorted(indices) == list(range(NUM_NODES)) and max(indices.values()) == 1, "no index twice"
    job_uid = jobs.get_job(custom, ns, "big")["metadata"]["uid"]
    assert all(p.metadata.owner_references[0].uid == job_uid for p in pods), "no orphans"


def _refusal_said(custom: client.CustomObjectsApi, ns: str, name: str) -> bool:
    conditions = (jobs.get_job(custom, ns, name).get("status") or {}).get("conditions") or []
    return any(c.get("reason") == Reason.POD_CREATION_FORBIDDEN.value for c in conditions)


@contextmanager
def _pods_refused_from_index(admission: client.AdmissionregistrationV1Api, core: client.CoreV1Api, ns: str,
                             held_from: int) -> Iterator[None]:
    """A ValidatingAdmissionPolicy, bound to namespace `ns` only, that refuses a pod whose node index is
    `held_from` or more; in force when this returns, gone (and no longer enforced) when the block ends."""
    name = f"hold-{ns}"
    admission.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods"]}]},
                 "validations": [{"expression": f"!has(object.metadata.labels) || "
                                                f"!('{LABEL_NODE_INDEX}' in object.metadata.labels) || "
                                                f"int(object.metadata.labels['{LABEL_NODE_INDEX}']) < {held_from}",
                                  "reason": "Forbidden", "message": f"held: node index {held_from} or more"}]}})
    admission.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}})
    try:
        # The apiserver compiles a new policy and learns of its binding from its own watches: moments later.
        wait_for(lambda: _admitted(core, ns, held_from) is False, timeout=30, what="the hold enforced")
        yield
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)
    wait_for(lambda: _admitted(core, ns, held_from) is True, timeout=30, what="the hold lifted")


def _admitted(core: client.CoreV1Api, ns: str, index: int) -> bool | None:
    """Whether a pod of node index `index` would be created in `ns` now (a server-side dry run); None while
    another refusal hides the answer (the namespace's default ServiceAccount not made yet)."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"probe-{index}", "labels": {LABEL_NODE_INDEX: str(index)}},
           "spec": {"containers": [{"name": "c", "image": "probe"}]}}
    try:
        core.create_namespaced_pod(ns, pod, dry_run="All")
    except client.ApiException as e:
        if e.status != 403:
            raise
        return False if "held: node index" in str(e.body) else None
    return True
