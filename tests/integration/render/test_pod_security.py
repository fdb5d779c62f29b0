"""The pods the operator renders, judged by the apiserver's own Pod Security admission.

Each pod is created as a server-side dry run in a namespace enforcing a Pod Security level: admission runs
in full (PodSecurity, the ServiceAccount plugin, validation), nothing is stored. The same pods run on real
nodes in tests/integration/realnodes/test_pod_security.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client

from multinode.render.mirror_pod import render_mirror_pod, render_mirror_service_account
from multinode.render import RenderSettings
from multinode.render.pod import render_node_pod
from multinode.render.rendezvous_store import render_store_pod
from multinode.render.spare import render_spare_pod
from localcluster.harness.kube import new_namespace
from multinode.testing import stored_job
from localcluster.harness.waiting import wait_for

STORAGE = {"cache": {"claimName": "team-cache"}, "checkpointing": {"claimName": "ckpt"}}
NON_ROOT = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}


def enforcing(core: client.CoreV1Api, level: str) -> str:
    name = new_namespace(core, prefix=f"psa-{level[:4]}")
    core.patch_namespace(name, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level,
                                                         "pod-security.kubernetes.io/enforce-version": "latest"}}})
    return name


@pytest.fixture(scope="module")
def restricted(core: client.CoreV1Api) -> Iterator[str]:
    name = enforcing(core, "restricted")
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def baseline(core: client.CoreV1Api) -> Iterator[str]:
    name = enforcing(core, "baseline")
    yield name
    core.delete_namespace(name)


def admit(core: client.CoreV1Api, pod: dict) -> str | None:
    """None when the pod would be admitted, else the apiserver's reason."""
    try:
        core.create_namespaced_pod(pod["metadata"]["namespace"], pod, dry_run="All")
    except client.ApiException as e:
        return str(json.loads(e.body)["message"])
    return None


def test_a_job_that_runs_as_non_root_with_runtime_default_seccomp_meets_restricted(
        core: client.CoreV1Api, restricted: str) -> None:
    job = stored_job(namespace=restricted, **STORAGE, podTemplate={"securityContext": NON_ROOT})
    assert admit(core, render_node_pod(job, 0, 0)) is None
    # The mirror pod, under its own ServiceAccount (the ServiceAccount plugin wants it to exist). Stored without
    # its owner reference: the job it names was never created, so the garbage collector would delete it.
    account = render_mirror_service_account(job)
    del account["metadata"]["ownerReferences"]
    core.create_namespaced_service_account(restricted, account)
    # The plugin reads ServiceAccounts from its own cache (and, on a miss, GETs it): a moment may pass before it
    # knows the new one. Each refusal meanwhile is kept, so a timeout says what the apiserver answered.
    refusals: list[str] = []
    try:
        reason = wait_for(lambda: _known_service_account(admit(core, render_mirror_pod(job)), refusals), timeout=30,
                          what="the ServiceAccount admission plugin knowing the mirror's ServiceAccount")
    except AssertionError as e:
        raise AssertionError(f"{e}; {len(refusals)} refusals, the last: {refusals[-2:]}") from None
    assert reason == "admitted", reason


def test_a_hot_spare_meets_restricted_too(core: client.CoreV1Api, restricted: str) -> None:
    """Its image volume (the trainer's image, pulled with the pod) and its downward API env included."""
    job = stored_job(namespace=restricted, **STORAGE, spareNodes=1, failurePolicy={"restartStrategy": "InPlace"},
                     podTemplate={"securityContext": NON_ROOT})
    assert admit(core, render_spare_pod(job, 0, RenderSettings())) is None


def test_an_elastic_jobs_pods_and_its_rendezvous_store_meet_restricted(core: client.CoreV1Api,
                                                                       restricted: str) -> None:
    job = stored_job(3, namespace=restricted, **STORAGE, elastic={"minNodes": 2},
                     podTemplate={"securityContext": NON_ROOT})
    assert admit(core, render_node_pod(job, 0, 0)) is None
    assert admit(core, render_store_pod(job, 0)) is None
    assert admit(core, render_store_pod(job, 0, off_nodes=["gpu-0", "gpu-1", "gpu-2"])) is None


def test_pods_kept_off_several_named_machines_are_valid(core: client.CoreV1Api, restricted: str) -> None:
    """status.excludedNodes of two or more (health checks, stragglers): the apiserver takes one value per node
    field selector NotIn, so each machine is a requirement of its own."""
    job = stored_job(namespace=restricted, **STORAGE, podTemplate={"securityContext": NON_ROOT})
    assert admit(core, render_node_pod(job, 0, 1, excluded_nodes=["gpu-3", "gpu-9"])) is None


def _known_service_account(reason: str | None, refusals: list[str]) -> str | None:
    """"admitted", or the reason of a refusal that is not about the ServiceAccount being unknown yet (those are
    added to `refusals`)."""
    if reason is None:
        return "admitted"
    if "error looking up service account" in reason:
        refusals.append(reason)
        return None
    return reason


def test_without_the_jobs_non_root_user_only_the_trainer_is_refused(core: client.CoreV1Api, restricted: str) -> None:
    """The image's user is the one thing multinode cannot decide: the refusal names the trainer alone."""
    reason = admit(core, render_node_pod(stored_job(namespace=restricted), 0, 0))
    assert reason is not None and reason.endswith(
        'violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "trainer" must set '
        'securityContext.runAsNonRoot=true), seccompProfile (pod or container "trainer" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'), reason


def test_rdma_meets_baseline_only_without_ipc_lock(core: client.CoreV1Api, baseline: str) -> None:
    with_lock = stored_job(namespace=baseline, resourcesPerNode={"gpus": 8}, network={"rdma": {"count": 1}})
    reason = admit(core, render_node_pod(with_lock, 0, 0))
    assert reason is not None and reason.endswith(
        'violates PodSecurity "baseline:latest": non-default capabilities (containers "preflight", "trainer" must '
        'not include "IPC_LOCK" in securityContext.capabilities.add)'), reason
    without = stored_job(namespace=baseline, resourcesPerNode={"gpus": 8},
                         network={"rdma": {"count": 1, "ipcLock": False}})
    assert admit(core, render_node_pod(without, 0, 0)) is None
