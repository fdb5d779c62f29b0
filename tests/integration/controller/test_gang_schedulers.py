"""The gang schedulers users already run (spec.scheduling.volcano / coscheduling), against their real CRDs.

The CRDs come from the Go modules (tools/localcluster/build.sh gangcrds: Volcano's generated from
volcano.sh/apis with controller-gen, scheduler-plugins' copied from its module), installed by each test and
removed after it. Neither scheduler runs here: the pods name a scheduler that does not exist, so they stay
unbound; what is tested is the operator's side, the group object (fields, owner), the pods' keys and
schedulerName, a restart's new group and the old one's deletion, and a missing CRD.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from localcluster.binaries import ensure_gang_crds
from localcluster.harness.kube import kubectl
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from multinode.api import LABEL_ATTEMPT, LABEL_JOB_NAME
from tests.support import jobs

VOLCANO = ("scheduling.volcano.sh", "v1beta1", "podgroups")
COSCHEDULING = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
VOLCANO_CRDS = ("scheduling.volcano.sh_podgroups.yaml", "scheduling.volcano.sh_queues.yaml")
COSCHEDULING_CRDS = ("scheduling.x-k8s.io_podgroups.yaml",)


@pytest.fixture(scope="module")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture(scope="module")
def crd_dir() -> Path:
    return ensure_gang_crds()


@contextlib.contextmanager
def installed(kubeconfig: str, crd_dir: Path, files: tuple[str, ...]) -> Iterator[None]:
    """The CRDs applied and Established; deleted (and waited for) afterwards."""
    paths = [str(crd_dir / f) for f in files]
    args = [a for p in paths for a in ("-f", p)]
    kubectl(kubeconfig, "apply", "--server-side", *args)
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *args)
    try:
        yield
    finally:
        kubectl(kubeconfig, "delete", "--wait=true", "--ignore-not-found", *args)


def groups(custom: client.CustomObjectsApi, kind: tuple[str, str, str], namespace: str, job: str) -> dict[str, dict]:
    items = custom.list_namespaced_custom_object(*kind[:2], namespace, kind[2],
                                                 label_selector=f"{LABEL_JOB_NAME}={job}")["items"]
    return {g["metadata"]["name"]: g for g in items if not g["metadata"].get("deletionTimestamp")}


def pods_of(kubeconfig: str, namespace: str, job: str, attempt: int) -> list[dict]:
    out = kubectl(kubeconfig, "get", "pods", "-n", namespace, "-l", f"{LABEL_JOB_NAME}={job},{LABEL_ATTEMPT}={attempt}",
                  "-o", "json").stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def scheduling_status(custom: client.CustomObjectsApi, namespace: str, job: str) -> dict:
    return (jobs.get_job(custom, namespace, job).get("status") or {}).get("scheduling") or {}


def restart_by_deleting_a_pod(custom: client.CustomObjectsApi, core: client.CoreV1Api, kubeconfig: str,
                              namespace: str, job: str) -> None:
    """Delete one pod of attempt 0 once the status lists it: a lost pod, so the gang restarts (uncounted) as
    attempt 1. (A pod deleted before the operator recorded it is only created again.)"""
    def listed() -> bool:
        nodes = (jobs.get_job(custom, namespace, job).get("status") or {}).get("nodeStatuses") or []
        return sum(1 for n in nodes if n.get("pod") and n.get("phase")) == 3

    wait_for(listed, timeout=30, what="the status listing the 3 pods of attempt 0")
    [first, *_] = pods_of(kubeconfig, namespace, job, 0)
    core.delete_namespaced_pod(first["metadata"]["name"], namespace)


CASES = [
    pytest.param(VOLCANO, VOLCANO_CRDS, {"volcano": {"queue": "research"}}, "Volcano",
                 {"minMember": 3, "queue": "research"}, "volcano", id="volcano"),
    pytest.param(COSCHEDULING, COSCHEDULING_CRDS,
                 {"coscheduling": {"schedulerName": "scheduler-plugins-scheduler", "scheduleTimeoutSeconds": 30}},
                 "Coscheduling", {"minMember": 3, "scheduleTimeoutSeconds": 30}, "scheduler-plugins-scheduler",
                 id="coscheduling"),
]


@pytest.mark.parametrize(("kind", "files", "scheduling", "mode", "group_spec", "scheduler"), CASES)
def test_the_operator_makes_the_schedulers_group_per_attempt_and_joins_the_pods(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, kubeconfig: str, job_namespace: str, crd_dir: Path,
    kind: tuple[str, str, str], files: tuple[str, ...], scheduling: dict, mode: str, group_spec: dict,
    scheduler: str,
) -> None:
    ns, name = job_namespace, "gang"
    with installed(kubeconfig, crd_dir, files):
        # A group per attempt is the recreate path's (an InPlace gang replaces a lost pod outside any group).
        jobs.apply(kubeconfig, ns, training_job(name, 3, scheduling=scheduling,
                                                failurePolicy={"backoff": {"initialSeconds": 0},
                                                               "restartStrategy": "BlockingRecreate"}))
        uid = jobs.get_job(custom, ns, name)["metadata"]["uid"]

        [group] = wait_for(lambda: list(groups(custom, kind, ns, name).values()), timeout=30,
                           what=f"the {mode} PodGroup").copy()
        assert group["metadata"]["name"] == "gang-a0"
        assert {k: group["spec"][k] for k in group_spec} == group_spec
        [owner] = group["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("TrainingJob", name, uid, True)

        pods = wait_for(lambda: p if len(p := pods_of(kubeconfig, ns, name, 0)) == 3 else None, timeout=30,
                        what="the 3 pods of attempt 0")
        for pod in pods:
            assert pod["spec"]["schedulerName"] == scheduler
            assert "schedulingGroup" not in pod["spec"]  # no native gang beside it
            if mode == "Volcano":
                assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "gang-a0"
            else:
                assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "gang-a0"
            assert "nodeName" not in pod["spec"]  # no such scheduler runs here: nothing binds them
        status = wait_for(lambda: s if (s := scheduling_status(custom, ns, name)).get("gang") == mode else None,
                          timeout=30,
                          what=f"status.scheduling.gang {mode}")
        assert status["podGroup"] == "gang-a0"
        gang = wait_for(lambda: jobs.condition(jobs.get_job(custom, ns, name), "GangScheduled"), timeout=30,
                        what="the GangScheduled condition")
        assert (gang["status"], gang["reason"]) == ("False", "WaitingForScheduling"), gang
        assert f"waiting for {'Volcano' if mode == 'Volcano' else 'coscheduling'} to place all 3" in gang["message"]
        # The native PodGroup API is served on this cluster, yet no native group is made: one gang.
        assert not custom.list_namespaced_custom_object("scheduling.k8s.io", "v1alpha2", ns, "podgroups")["items"]

        restart_by_deleting_a_pod(custom, core, kubeconfig, ns, name)
        wait_for(lambda: (jobs.get_job(custom, ns, name).get("status") or {}).get("attempt") == 1, timeout=60,
                 what="the gang restarted as attempt 1")
        wait_for(lambda: set(groups(custom, kind, ns, name)) == {"gang-a1"}, timeout=60,
                 what="attempt 1's PodGroup made and attempt 0's deleted")
        pods = wait_for(lambda: p if len(p := pods_of(kubeconfig, ns, name, 1)) == 3 else None, timeout=30,
                        what="the 3 pods of attempt 1")
        key = "scheduling.k8s.io/group-name" if mode == "Volcano" else "scheduling.x-k8s.io/pod-group"
        where = "annotations" if mode == "Volcano" else "labels"
        assert {p["metadata"][where][key] for p in pods} == {"gang-a1"}
        wait_for(lambda: scheduling_status(custom, ns, name).get("podGroup") == "gang-a1", timeout=30,
                 what="status.scheduling.podGroup of attempt 1 (written after its pods)")
        jobs.get_job(custom, ns, name)  # still there: the group went, not the job
        custom.delete_namespaced_custom_object("multinode.dev", "v1alpha1", ns, "trainingjobs", name)
        wait_for(lambda: jobs.job_gone(custom, ns, name), timeout=30, what="the job deleted")


def test_a_missing_crd_keeps_the_job_pending_with_a_reason_until_it_is_installed(
    custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str, crd_dir: Path,
) -> None:
    ns, name = job_namespace, "early"
    assert kubectl(kubeconfig, "get", "crd", "podgroups.scheduling.volcano.sh", check=False).returncode != 0
    jobs.apply(kubeconfig, ns, training_job(name, 2, scheduling={"volcano": {}}))

    def not_installed() -> dict | None:
        found = jobs.condition(jobs.get_job(custom, ns, name), "GangScheduled")
        return found if found is not None and found["reason"] == "GangSchedulerNotInstalled" else None

    gang = wait_for(not_installed, timeout=30, what="GangScheduled=False GangSchedulerNotInstalled")
    assert gang["status"] == "False"
    assert "serves no scheduling.volcano.sh/v1beta1 PodGroup" in gang["message"]
    running = jobs.condition(jobs.get_job(custom, ns, name), "Running")
    assert running is not None and running["reason"] == "GangSchedulerNotInstalled"
    assert jobs.get_job(custom, ns, name)["status"]["phase"] == "Pending"
    assert pods_of(kubeconfig, ns, name, 0) == []  # no pod without its gang

    with installed(kubeconfig, crd_dir, VOLCANO_CRDS):
        # The operator retries with backoff (at most a minute apart); the CRD is enough, no restart.
        wait_for(lambda: set(groups(custom, VOLCANO, ns, name)) == {"early-a0"}, timeout=90,
                 what="the PodGroup made once the CRD is installed")
        wait_for(lambda: len(pods_of(kubeconfig, ns, name, 0)) == 2, timeout=30, what="the pods created")
        custom.delete_namespaced_custom_object("multinode.dev", "v1alpha1", ns, "trainingjobs", name)
        wait_for(lambda: jobs.job_gone(custom, ns, name), timeout=30, what="the job deleted")


def test_a_job_name_of_61_characters_gets_a_coscheduling_group_whose_name_is_a_valid_label(
    custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str, crd_dir: Path
) -> None:
    """`<job>-a0` would be 64 characters: too long for the pods' scheduling.x-k8s.io/pod-group label, so every
    pod was refused. The group's name is shortened with a hash, and the pods carry it."""
    ns, name = job_namespace, "long-" + "x" * 55 + "s"
    assert len(name) == 61
    scheduling = {"coscheduling": {"schedulerName": "scheduler-plugins-scheduler"}}
    with installed(kubeconfig, crd_dir, COSCHEDULING_CRDS):
        jobs.apply(kubeconfig, ns, training_job(name, 2, scheduling=scheduling))
        [group] = wait_for(lambda: list(groups(custom, COSCHEDULING, ns, name).values()), timeout=30,
                           what="the coscheduling PodGroup")
        group_name = group["metadata"]["name"]
        assert len(group_name) <= 63 and group_name.endswith("-a0")
        pods = wait_for(lambda: p if len(p := pods_of(kubeconfig, ns, name, 0)) == 2 else None, timeout=30,
                        what="the 2 pods of attempt 0")
        assert {p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for p in pods} == {group_name}
        # The status is written after the pods it counts are created: the pods can be seen first.
        assert wait_for(lambda: scheduling_status(custom, ns, name).get("podGroup"), timeout=30,
                        what="status.scheduling.podGroup") == group_name
        custom.delete_namespaced_custom_object("multinode.dev", "v1alpha1", ns, "trainingjobs", name)
        wait_for(lambda: jobs.job_gone(custom, ns, name), timeout=30, what="the job deleted")
