"""The checkpoint mirror on the local cluster.

kwok runs no containers, so the mirror pod the operator creates only "runs" in kwok. The real mirror,
`multinode mirror`, runs here as a local process with the mirror pod's own identity (a token of the
ServiceAccount the operator made), against real directories standing in for the two volumes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from localcluster import LocalCluster

from localcluster.harness.kwoknodes import clear_failure, fail_nodes
from multinode.api import GROUP, PLURAL, VERSION
from multinode.testing import training_job
from tests.support import jobs
from tests.support.jobs import FINISH_AFTER
from localcluster.harness.kube import kubectl
from tests.support.kube import client_for_token, kubeconfig_for_token, service_account_token
from tests.support.mirror import MirrorProcess, write_checkpoint
from tests.support.nodepools import on_pool, own_pool
from tests.support.storage import bound_claim
from localcluster.harness.waiting import wait_for

CACHE_MOUNT, CKPT_MOUNT = "/cache", "/checkpoints"


def checkpointed_job(name: str, num_nodes: int = 2, **checkpointing) -> dict:
    return training_job(
        name, num_nodes, cache={"claimName": "team-cache", "mountPath": CACHE_MOUNT},
        checkpointing={"claimName": "ckpt-backup", "mountPath": CKPT_MOUNT, "keep": 2, **checkpointing})


@pytest.fixture
def volumes(core: client.CoreV1Api, job_namespace: str) -> Iterator[str]:
    pvs = [bound_claim(core, job_namespace, "team-cache"), bound_claim(core, job_namespace, "ckpt-backup")]
    yield job_namespace
    for pv in pvs:
        core.delete_persistent_volume(pv)


def latest_name(custom: client.CustomObjectsApi, ns: str, name: str) -> str | None:
    status = jobs.get_job(custom, ns, name).get("status") or {}
    return ((status.get("checkpoints") or {}).get("latest") or {}).get("name")


def test_mirror_pod_identity_reporting_and_final_sync(
    api: client.ApiClient, core: client.CoreV1Api, kubeconfig: str, volumes: str, tmp_path: Path
) -> None:
    ns, custom = volumes, client.CustomObjectsApi(api)
    jobs.apply(kubeconfig, ns, checkpointed_job("ckpt"))
    job = jobs.wait_phase(custom, ns, "ckpt", "Running")

    # The operator made the mirror pod, with the two volumes mounted the right way round, and its identity.
    mirror_pod = wait_for(lambda: next((p for p in core.list_namespaced_pod(ns).items
                                        if p.metadata.name == "ckpt-mirror"), None), timeout=30, what="mirror pod")
    assert mirror_pod.metadata.owner_references[0].uid == job["metadata"]["uid"]
    assert mirror_pod.spec.service_account_name == "ckpt-mirror"
    mounts = {m.mount_path: bool(m.read_only) for m in mirror_pod.spec.containers[0].volume_mounts
              if m.name.startswith("multinode-")}
    assert mounts == {CACHE_MOUNT: True, CKPT_MOUNT: False}
    assert mirror_pod.spec.containers[0].args[:4] == ["--source", f"{CACHE_MOUNT}/ckpt", "--dest", f"{CKPT_MOUNT}/ckpt"]
    node_pod = core.read_namespaced_pod("ckpt-0-a0", ns)
    node_env = jobs.pod_env(core, node_pod)
    assert node_env["BT_CHECKPOINT_DIR"] == f"{CACHE_MOUNT}/ckpt"
    assert "MULTINODE_RESUME_FROM" in node_env and not node_env["MULTINODE_RESUME_FROM"]  # "" is stored as absent

    token = service_account_token(core, ns, "ckpt-mirror")
    source, dest = tmp_path / "cache" / "ckpt", tmp_path / "checkpoints" / "ckpt"
    source.mkdir(parents=True)
    mirror = MirrorProcess(kubeconfig_for_token(kubeconfig, token, tmp_path / "mirror.kubeconfig"), ns, "ckpt",
                           source, dest, tmp_path / "mirror.log")
    try:
        write_checkpoint(source, "checkpoint_0000100")
        wait_for(lambda: latest_name(custom, ns, "ckpt") == "checkpoint_0000100", timeout=30,
                 what="the mirror to report checkpoint_0000100")
        assert "checkpoint_0000100" in kubectl(kubeconfig, "get", "tj", "ckpt", "-n", ns).stdout  # printer column
        assert mirror.metrics()["multinode_mirror_checkpoints_total"] == 1

        # Training ends with one more checkpoint written at the last moment: the final sync must take it.
        write_checkpoint(source, "checkpoint_0000200")
        (source / "checkpoint_0000300.tmp").mkdir()  # in progress: never mirrored
        for i in range(2):
            core.patch_namespaced_pod(f"ckpt-{i}-a0", ns, {"metadata": {"annotations": {FINISH_AFTER: "0s"}}})
        done = jobs.wait_phase(custom, ns, "ckpt", "Succeeded", timeout=60)
        assert mirror.proc.wait(timeout=30) == 0, mirror.log.read_text()
    finally:
        mirror.stop()

    synced = jobs.condition(done, "CheckpointsSynced")
    assert (synced["status"], synced["reason"]) == ("True", "FinalSyncDone")
    checkpoints = done["status"]["checkpoints"]
    assert checkpoints["latest"]["name"] == "checkpoint_0000200" and checkpoints["finalSyncTime"]
    assert done["status"]["completionTime"] >= checkpoints["finalSyncTime"]
    published = sorted(p.name for p in dest.iterdir() if not p.name.startswith("."))
    assert published == ["checkpoint_0000100", "checkpoint_0000200"]


def test_the_mirror_identity_may_touch_only_its_own_jobs_status(
    api: client.ApiClient, core: client.CoreV1Api, kubeconfig: str, volumes: str
) -> None:
    ns = volumes
    jobs.apply(kubeconfig, ns, checkpointed_job("mine"))
    jobs.apply(kubeconfig, ns, checkpointed_job("theirs"))
    wait_for(lambda: {p.metadata.name for p in core.list_namespaced_pod(ns).items} >= {"mine-mirror", "theirs-mirror"},
             timeout=30, what="both mirror pods")
    as_mirror = client_for_token(api, service_account_token(core, ns, "mine-mirror"))
    mirror_custom, mirror_core = client.CustomObjectsApi(as_mirror), client.CoreV1Api(as_mirror)

    # Allowed: read and patch its own job's status.
    own = mirror_custom.get_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "mine")
    assert own["metadata"]["name"] == "mine"
    mirror_custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "mine",
                                                        {"status": {"checkpoints": {"mirrored": 0}}})

    refused = {
        "another job's status": lambda: mirror_custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, "theirs", {"status": {"checkpoints": {"mirrored": 9}}}),
        "its own job's spec": lambda: mirror_custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "mine", {"spec": {"image": "evil:1"}}),
        "reading the job object": lambda: mirror_custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "mine"),
        "listing jobs": lambda: mirror_custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL),
        "listing pods": lambda: mirror_core.list_namespaced_pod(ns),
        "reading secrets": lambda: mirror_core.list_namespaced_secret(ns),
    }
    for what, call in refused.items():
        with pytest.raises(client.ApiException) as e:
            call()
        assert e.value.status == 403, what


def test_a_job_resuming_from_another_gets_its_latest_mirrored_checkpoint(
    api: client.ApiClient, core: client.CoreV1Api, kubeconfig: str, volumes: str
) -> None:
    ns, custom = volumes, client.CustomObjectsApi(api)
    jobs.apply(kubeconfig, ns, checkpointed_job("first"))
    jobs.wait_phase(custom, ns, "first", "Running")
    # What the first job's mirror reported (written here with the mirror's identity, as the pod would).
    as_mirror = client.CustomObjectsApi(client_for_token(api, service_account_token(core, ns, "first-mirror")))
    path = f"{CKPT_MOUNT}/first/checkpoint_0000500"
    as_mirror.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "first", {"status": {"checkpoints": {
        "latest": {"name": "checkpoint_0000500", "path": path, "step": 500, "bytes": 1,
                   "mirroredAt": "2026-11-20T12:00:00Z"}}}})
    wait_for(lambda: latest_name(custom, ns, "first") == "checkpoint_0000500", timeout=10, what="status written")

    jobs.apply(kubeconfig, ns, checkpointed_job("second", resumeFrom={"trainingJob": "first"}))
    second = jobs.wait_phase(custom, ns, "second", "Running")

    for i in range(2):
        env = jobs.pod_env(core, core.read_namespaced_pod(f"second-{i}-a0", ns))
        assert env["MULTINODE_RESUME_FROM"] == env["BT_LOAD_CHECKPOINT_DIR"] == path
    assert second["status"]["resumedFrom"] == path
    # The first job's mirror learns it from its own job's status (its Role reads nothing else): pinned.
    resumed_by = wait_for(lambda: (jobs.get_job(custom, ns, "first").get("status") or {}).get("resumedBy"),
                          timeout=30, what="first's status.resumedBy")
    assert resumed_by == [{"path": path, "trainingJob": "second"}]

    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "second")
    wait_for(lambda: not (jobs.get_job(custom, ns, "first").get("status") or {}).get("resumedBy"), timeout=30,
             what="the pin gone with the job that held it")


def test_a_checkpoint_not_complete_is_reported_with_its_reason_until_it_is(
    api: client.ApiClient, core: client.CoreV1Api, kubeconfig: str, volumes: str, tmp_path: Path
) -> None:
    ns, custom = volumes, client.CustomObjectsApi(api)
    jobs.apply(kubeconfig, ns, checkpointed_job("slow"))
    jobs.wait_phase(custom, ns, "slow", "Running")
    token = service_account_token(core, ns, "slow-mirror")
    source, dest = tmp_path / "cache" / "slow", tmp_path / "checkpoints" / "slow"
    source.mkdir(parents=True)
    mirror = MirrorProcess(kubeconfig_for_token(kubeconfig, token, tmp_path / "mirror.kubeconfig"), ns, "slow",
                           source, dest, tmp_path / "mirror.log", "--stalled-after", "0")

    def checkpoints() -> dict:
        return (jobs.get_job(custom, ns, "slow").get("status") or {}).get("checkpoints") or {}
    try:
        write_checkpoint(source, "checkpoint_0000100")
        (source / "checkpoint_0000100" / "COMPLETE").unlink()   # a save that has written its shards only
        [entry] = wait_for(lambda: checkpoints().get("notReady"), timeout=30, what="notReady reported")
        assert (entry["name"], entry["step"], entry["reason"]) == ("checkpoint_0000100", 100, "NoCompletionEvidence")
        assert entry["message"].startswith(f"{source / 'checkpoint_0000100'}: ") and entry["since"]
        # The newest checkpoint, unchanged for longer than --stalled-after: a problem, visible with -o yaml.
        problem = wait_for(lambda: checkpoints().get("problem"), timeout=30, what="CheckpointStalled reported")
        assert problem["reason"] == "CheckpointStalled" and "checkpoint_0000100" in problem["message"]
        assert "notReady" in kubectl(kubeconfig, "get", "tj", "slow", "-n", ns, "-o", "yaml").stdout
        assert mirror.metric("multinode_mirror_not_ready_checkpoints", reason="NoCompletionEvidence") == 1

        (source / "checkpoint_0000100" / "COMPLETE").write_text("")   # the save ends
        wait_for(lambda: latest_name(custom, ns, "slow") == "checkpoint_0000100", timeout=30, what="published")
        wait_for(lambda: "notReady" not in checkpoints() and "problem" not in checkpoints(), timeout=30,
                 what="notReady and the problem cleared")
        assert mirror.metric("multinode_mirror_not_ready_checkpoints", reason="NoCompletionEvidence") == 0
    finally:
        mirror.stop()


@pytest.fixture
def mirror_pool(local_cluster: LocalCluster, core: client.CoreV1Api) -> Iterator[str]:
    """Nodes of this test's own: one of them is failed (kwok may leave it NotReady), and all go after."""
    with own_pool(local_cluster, core, "mirrorloss") as pool:
        try:
            yield pool.prefix
        finally:
            clear_failure(core, pool.names)


def test_a_mirror_on_a_node_that_fails_is_replaced_even_if_the_trainers_tolerate_it_for_ever(
    core: client.CoreV1Api, kubeconfig: str, volumes: str, mirror_pool: str
) -> None:
    ns = volumes
    manifest = checkpointed_job("lossy-mirror")
    # The trainers ride out a lost node for ever (the user's choice); the mirror must not.
    forever = [{"key": key, "operator": "Exists", "effect": "NoExecute"}
               for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
    manifest["spec"] |= {"failurePolicy": {"nodeLossTolerationSeconds": 3},
                         "podTemplate": on_pool(mirror_pool, forever)}
    jobs.apply(kubeconfig, ns, manifest)

    def mirror_pod() -> client.V1Pod | None:
        pods = [p for p in core.list_namespaced_pod(ns).items if p.metadata.name == "lossy-mirror-mirror"]
        return pods[0] if pods and pods[0].spec.node_name and pods[0].status.phase == "Running" else None
    first = wait_for(mirror_pod, timeout=60, what="the mirror running")

    fail_nodes(core, [first.spec.node_name])

    replaced = wait_for(lambda: (p := mirror_pod()) is not None and p.metadata.uid != first.metadata.uid and p,
                        timeout=90, what="a new mirror pod on another node")
    assert replaced.spec.node_name != first.spec.node_name
    events = core.list_namespaced_event(ns, field_selector="reason=PodForceDeleted").items
    assert any("lossy-mirror-mirror" in e.message for e in events), [e.message for e in events]
