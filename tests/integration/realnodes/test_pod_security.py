"""Pod Security on real nodes, with the operator and its admission policies installed by helm: a checkpointed
job succeeds in a namespace enforcing `restricted`, and an RDMA job in one enforcing `baseline`.

What the containers report about themselves (uid, capabilities, no_new_privs, a token or none, the memlock
limit) is read from the trainers' logs: the kubelet and runc really applied what the operator rendered.
"""

from __future__ import annotations

import re
import resource
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from localcluster import LocalCluster
from localcluster.realnodes import FAKE_RDMA_DEVICES_ENV

from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from multinode.render.security import OPERATOR_IMAGE_UID
from localcluster.harness.kube import kubectl, new_namespace
from localcluster.harness.waiting import wait_for
from tests.support import jobs
from tests.support.realnodes import clients, pod_log, real_job
from tests.support.paths import REPO

EXAMPLE = REPO / "examples" / "real"
TRAINER_UID = 1000
SELF_REPORT = textwrap.dedent("""
    import os, pathlib, resource, time
    status = dict(line.split(":\\t", 1) for line in pathlib.Path("/proc/self/status").read_text().splitlines())
    token = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token")
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    print(f"uid={os.getuid()} capeff={status['CapEff'].strip()} nonewprivs={status['NoNewPrivs'].strip()} "
          f"token={token} memlock={'unlimited' if memlock == resource.RLIM_INFINITY else memlock} "
          f"rdma={os.environ.get('RDMA_ENV', '')}", flush=True)
""").replace("RDMA_ENV", FAKE_RDMA_DEVICES_ENV)
CHECKPOINT = SELF_REPORT + textwrap.dedent("""
    if os.environ["NODE_RANK"] == "0":
        step = pathlib.Path(os.environ["MULTINODE_CHECKPOINT_DIR"]) / "step-10"
        step.mkdir(parents=True)
        (step / "weights.bin").write_bytes(os.urandom(1 << 20))
        (step / "COMPLETE").write_text("")
    time.sleep(15)
""")


def enforcing(core: client.CoreV1Api, level: str) -> str:
    namespace = new_namespace(core, prefix=f"real{level}")
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level,
                                                              "pod-security.kubernetes.io/enforce-version": "latest"}}})
    return namespace


def _enforcing_namespace(real_operator: tuple[LocalCluster, str], level: str) -> Iterator[tuple[LocalCluster, str]]:
    cluster, _ = real_operator
    core, _ = clients(cluster)
    namespace = enforcing(core, level)
    yield cluster, namespace
    core.delete_namespace(namespace)


@pytest.fixture
def restricted(real_operator: tuple[LocalCluster, str]) -> Iterator[tuple[LocalCluster, str]]:
    yield from _enforcing_namespace(real_operator, "restricted")


@pytest.fixture
def baseline(real_operator: tuple[LocalCluster, str]) -> Iterator[tuple[LocalCluster, str]]:
    yield from _enforcing_namespace(real_operator, "baseline")


def reports(core: client.CoreV1Api, namespace: str, job: str) -> list[dict[str, str]]:
    """Each trainer's line of SELF_REPORT, parsed."""
    found = []
    for pod in core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={job}").items:
        match = re.search(r"^(uid=.*)$", pod_log(core, namespace, pod.metadata.name), re.M)
        assert match, pod.metadata.name
        found.append(dict(field.split("=", 1) for field in match.group(1).split()))
    return found


def test_a_checkpointed_job_succeeds_in_a_namespace_enforcing_restricted(
        restricted: tuple[LocalCluster, str]) -> None:
    cluster, namespace = restricted
    core, custom = clients(cluster)
    kubectl(str(cluster.kubeconfig), "apply", "-n", namespace, "-f", str(EXAMPLE / "storage.yaml"))
    # All a job adds to meet restricted: a non-root user and the runtime's seccomp profile.
    non_root = {"runAsNonRoot": True, "runAsUser": TRAINER_UID, "seccompProfile": {"type": "RuntimeDefault"}}
    body = real_job("restricted", 2, CHECKPOINT, pod_template={"securityContext": non_root},
                    cache={"claimName": "real-cache"},
                    checkpointing={"claimName": "real-checkpoints", "completion": "marker", "intervalSeconds": 2,
                                   "settleSeconds": 1})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    done = jobs.wait_phase(custom, namespace, "restricted", "Succeeded", timeout=240)
    assert done["status"]["checkpoints"]["latest"]["name"] == "step-10"
    synced = jobs.condition(done, "CheckpointsSynced")
    assert (synced["status"], synced["reason"]) == ("True", "FinalSyncDone")
    # The trainers: the job's user, no capability, no privilege escalation, no API token.
    for report in reports(core, namespace, "restricted"):
        assert report["uid"] == str(TRAINER_UID) and report["capeff"] == "0000000000000000", report
        assert report["nonewprivs"] == "1" and report["token"] == "False", report
    # The preflight made the job's cache dir as the trainer's user (rank 0 wrote into it); the mirror ran as the
    # operator image's user.
    mirror = core.read_namespaced_pod("restricted-mirror", namespace)
    assert mirror.spec.security_context.run_as_user == OPERATOR_IMAGE_UID
    volume = core.read_persistent_volume(core.read_namespaced_persistent_volume_claim(
        "real-checkpoints", namespace).spec.volume_name)
    copied = Path(volume.spec.host_path.path) / "restricted" / "step-10" / "weights.bin"
    assert copied.stat().st_size == 1 << 20 and copied.stat().st_uid == OPERATOR_IMAGE_UID


def test_an_rdma_job_without_ipc_lock_runs_in_a_namespace_enforcing_baseline(
        baseline: tuple[LocalCluster, str]) -> None:
    """Without IPC_LOCK the memlock limit the nodes' runtime gives containers is what RDMA gets, and the
    preflight judges it against the job's floor. With IPC_LOCK (the default) Pod Security refuses the pods, and
    the job says so."""
    cluster, namespace = baseline
    core, custom = clients(cluster)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                           real_job("locked", 1, SELF_REPORT, network={"rdma": {"count": 1}}))

    def refused() -> str | None:
        status = jobs.get_job(custom, namespace, "locked").get("status") or {}
        running = next((c for c in status.get("conditions", []) if c["type"] == "Running"), {})
        return running.get("message") if running.get("reason") == "PodCreationForbidden" else None

    message = wait_for(refused, timeout=60, what="the job saying why its pods are refused")
    assert 'violates PodSecurity "baseline:latest": non-default capabilities' in message and "IPC_LOCK" in message

    # This machine's containers inherit an 8 MiB limit (raising it needs CAP_SYS_RESOURCE, which this VM lacks;
    # RDMA nodes raise it with containerd's LimitMEMLOCK=infinity): the job's floor says what it needs.
    floor = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    body = real_job("rdma", 2, SELF_REPORT, network={"rdma": {"count": 1, "ipcLock": False}},
                    healthCheck={"memlockFloorBytes": floor, "rdmaDeviceEnv": FAKE_RDMA_DEVICES_ENV})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    jobs.wait_phase(custom, namespace, "rdma", "Succeeded", timeout=180)
    # The preflight's RDMA check passed (devices, and the limit against the floor) without the capability; the
    # trainers got the device and no capability at all.
    for report in reports(core, namespace, "rdma"):
        assert report["rdma"] and report["memlock"] == str(floor) and report["capeff"] == "0000000000000000", report
