"""Security contexts of the rendered pods: restricted by default, the job's own settings where it gives them.

Whether the apiserver's Pod Security admission accepts these pods is tests/integration/render/test_pod_security.py.
"""

from __future__ import annotations

import pytest

from multinode.render.mirror_pod import render_mirror_pod, render_mirror_role_binding
from multinode.render.pod import render_node_pod
from multinode.render.security import OPERATOR_IMAGE_UID
from multinode.render.settings import RenderSettings
from multinode.testing import stored_job
from multinode.testing import preflight, trainer

STORAGE = {"cache": {"claimName": "team-cache"}, "checkpointing": {"claimName": "ckpt"}}
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}


def test_the_trainer_drops_every_capability_and_cannot_escalate_by_default() -> None:
    pod = render_node_pod(stored_job(), 0, 0)
    assert trainer(pod)["securityContext"] == {"capabilities": {"drop": ["ALL"]}, "allowPrivilegeEscalation": False}
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "securityContext" not in pod["spec"]


def test_ipc_lock_comes_back_only_with_rdma_and_only_while_ipc_lock_is_asked() -> None:
    rdma = render_node_pod(stored_job(network={"rdma": {"count": 1}}), 0, 0)
    assert trainer(rdma)["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"], "drop": ["ALL"]}
    assert preflight(rdma)["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    baseline = render_node_pod(stored_job(network={"rdma": {"count": 1, "ipcLock": False}}), 0, 0)
    assert trainer(baseline)["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert preflight(baseline)["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # The preflight still checks the memlock limit: without the capability, the limit itself must do.
    assert "--memlock-floor" in preflight(baseline)["args"]


def test_the_jobs_pod_and_container_contexts_are_passed_on_and_fill_multinodes_defaults() -> None:
    job = stored_job(podTemplate={
        "securityContext": {**RESTRICTED_POD, "fsGroup": 2000},
        "containerSecurityContext": {"readOnlyRootFilesystem": True, "capabilities": {"add": ["SYS_PTRACE"]}},
        "runtimeClassName": "gvisor", "automountServiceAccountToken": True},
        network={"rdma": {"count": 1}})
    pod = render_node_pod(job, 0, 0)
    assert pod["spec"]["securityContext"] == {**RESTRICTED_POD, "fsGroup": 2000}
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    assert pod["spec"]["automountServiceAccountToken"] is True
    assert trainer(pod)["securityContext"] == {
        "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
        "capabilities": {"add": ["SYS_PTRACE", "IPC_LOCK"], "drop": ["ALL"]}}


@pytest.mark.parametrize("asked", [{"privileged": True}, {"capabilities": {"add": ["SYS_ADMIN"]}}])
def test_no_escalation_default_where_the_apiserver_would_refuse_it(asked: dict) -> None:
    """allowPrivilegeEscalation: false beside privileged or SYS_ADMIN is an invalid pod."""
    context = trainer(render_node_pod(stored_job(podTemplate={"containerSecurityContext": asked}), 0, 0))[
        "securityContext"]
    assert "allowPrivilegeEscalation" not in context


def test_an_explicit_empty_drop_keeps_the_runtimes_capabilities() -> None:
    job = stored_job(podTemplate={"containerSecurityContext": {"capabilities": {"drop": []}}})
    assert "capabilities" not in trainer(render_node_pod(job, 0, 0))["securityContext"]


def test_the_preflight_is_restricted_and_runs_as_the_trainers_non_root_user() -> None:
    default = preflight(render_node_pod(stored_job(), 0, 0))["securityContext"]
    assert default == {"runAsNonRoot": True, "runAsUser": OPERATOR_IMAGE_UID, "runAsGroup": OPERATOR_IMAGE_UID,
                       "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                       "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    # It creates the job's cache dir: as the trainer's user, the trainer may write it.
    named = stored_job(**STORAGE, podTemplate={"securityContext": {"runAsUser": 1000, "runAsGroup": 3000},
                                               "containerSecurityContext": {"runAsUser": 1001}})
    named_preflight = preflight(render_node_pod(named, 0, 0))
    context = named_preflight["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"]) == (1001, 3000)
    assert "--make-dir-mode" not in named_preflight["args"]  # the dir is the trainer's own
    # A root trainer's preflight is still not root.
    root = stored_job(podTemplate={"securityContext": {"runAsUser": 0}})
    assert preflight(render_node_pod(root, 0, 0))["securityContext"]["runAsUser"] == OPERATOR_IMAGE_UID


def test_the_mirror_runs_as_the_operator_images_user_and_may_write_the_checkpoint_volume() -> None:
    spec = render_mirror_pod(stored_job(**STORAGE, podTemplate={"securityContext": {"runAsUser": 0}}))["spec"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": OPERATOR_IMAGE_UID, "runAsGroup": OPERATOR_IMAGE_UID,
        "fsGroup": OPERATOR_IMAGE_UID, "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"}}
    (container,) = spec["containers"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert spec["automountServiceAccountToken"] is True
    # fsGroup is for the checkpoint volume: the cache claim is mounted read-only, its ownership left alone.
    volumes = {v["name"]: v["persistentVolumeClaim"] for v in spec["volumes"]}
    assert volumes == {"multinode-cache": {"claimName": "team-cache", "readOnly": True},
                       "multinode-checkpoints": {"claimName": "ckpt"}}


def test_the_mirror_binding_names_the_configured_cluster_role_and_only_the_jobs_mirror() -> None:
    binding = render_mirror_role_binding(stored_job(**STORAGE), RenderSettings(mirror_cluster_role="mn-mirror"))
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "mn-mirror"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llama-mirror", "namespace": "ml"}]
    with pytest.raises(ValueError, match="mirror_cluster_role"):
        RenderSettings(mirror_cluster_role="")
