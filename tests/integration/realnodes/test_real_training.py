"""The real example (examples/real/) on real nodes: torchrun forms its world from the operator's env alone,
the all-reduce is right on every rank, DCP checkpoints are mirrored, and a SIGKILLed rank restarts the gang
in place (failurePolicy.restartStrategy InPlace: the same pods on the same nodes, the restarted trainers
reading the new attempt and the checkpoint it resumes from) — twice, the second time rank 0, whose pod hosts
the rendezvous — and the job succeeds. The chart's operator, its RBAC and admission policies: the pod
annotations it writes are all it may change of a pod. (A gang recreated in new pods on real nodes:
test_drain.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from kubernetes import client
from localcluster import LocalCluster
from localcluster.faults import kill_worker_script

from localcluster.harness import realexample
from localcluster.harness.kube import allow_host_path, kubectl, new_namespace
from localcluster.harness.waiting import wait_for
from multinode.api import LABEL_JOB_NAME
from tests.support import jobs
from tests.support.realnodes import attempt_logs, clients

JOB = "real-train"
STEP = re.compile(r"^step=(\d+) rank=\d+ loss=", re.M)
KILL_WORKER = kill_worker_script("/app/train.py")
STEPS = 15


def _status(custom: client.CustomObjectsApi, namespace: str) -> dict:
    return jobs.get_job(custom, namespace, JOB).get("status") or {}


def _pods(core: client.CoreV1Api, namespace: str) -> dict[str, tuple[str, str]]:
    return {p.metadata.name: (p.metadata.uid, p.spec.node_name) for p in core.list_namespaced_pod(
        namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}").items}


def test_the_real_example_trains_survives_killed_ranks_in_place_and_succeeds(
        real_operator: tuple[LocalCluster, str], tmp_path: Path) -> None:
    cluster, _ = real_operator
    core, custom = clients(cluster)
    namespace = new_namespace(core, prefix="realtrain")
    allow_host_path(core, namespace)  # the example mounts torch from the host
    kc = str(cluster.kubeconfig)
    # As a user applies it (the trainer image from the cluster's registry, envsubst filling in the address),
    # restarting in place.
    folder = realexample.write_manifests(cluster.registry, tmp_path)
    manifest = yaml.safe_load((folder / "trainingjob.yaml").read_text())
    manifest["spec"]["failurePolicy"]["restartStrategy"] = "InPlace"
    realexample.set_env(manifest, TRAIN_STEPS=str(STEPS))
    (folder / "trainingjob.yaml").write_text(yaml.safe_dump(manifest))
    try:
        kubectl(kc, "apply", "-n", namespace, "-f", str(folder))

        def training(attempt: int, past: int = 0):
            logs = attempt_logs(core, namespace, JOB, attempt)
            steps = [[int(s) for s in STEP.findall(log)] for log in logs.values()]
            return logs if len(logs) == 2 and all(s and s[-1] > past for s in steps) else None

        # Rendezvous from the env alone: both ranks train, and the all-reduce sum of the ranks is right.
        logs = wait_for(lambda: training(0, past=6), timeout=300, what="both ranks of attempt 0 past step 6")
        for log in logs.values():
            assert re.search(r"^allreduce_sum=1 expected=1", log, re.M), log
        # The mirror publishes a complete DCP checkpoint and the status names it.
        latest = wait_for(lambda: (_status(custom, namespace).get("checkpoints") or {}).get("latest"),
                          timeout=120, what="a mirrored checkpoint in status.checkpoints.latest")
        assert re.fullmatch(r"step-\d+", latest["name"]), latest
        pods = _pods(core, namespace)
        assert sorted(pods) == [f"{JOB}-0-a0", f"{JOB}-1-a0"]

        for attempt, victim in ((1, 1), (2, 0)):
            # SIGKILL the rank's training process: torchrun exits, the pod restarts in place, the gang follows.
            killed = kubectl(kc, "exec", "-n", namespace, f"{JOB}-{victim}-a0", "-c", "trainer", "--",
                             "python3", "-c", KILL_WORKER).stdout
            assert killed.startswith("killed"), killed
            status = wait_for(lambda a=attempt: (s := _status(custom, namespace)).get("attempt") == a and s,
                              timeout=120, what=f"attempt {attempt}")
            assert (status["podsAttempt"], status["restarts"]) == (0, attempt), status
            record = status["restartHistory"][-1]
            assert (record["attempt"], record["reason"], record["counted"]) == (attempt - 1, "PodFailed", True)
            assert "restarted in place" in record["message"]
            logs = wait_for(lambda a=attempt: training(a), timeout=180,
                            what=f"both ranks of attempt {attempt} training")
            resumed = _status(custom, namespace).get("resumedFrom")
            assert resumed, "the attempt resumes from the mirrored checkpoint"
            saved = int(re.search(r"step-(\d+)", resumed).group(1))
            for log in logs.values():
                assert re.search(rf"^attempt={attempt} rank=", log, re.M), log
                assert f"resumed_from={resumed}" in log, log
                assert int(STEP.findall(log)[0]) == saved + 1  # training goes on from the checkpoint
            assert _pods(core, namespace) == pods, "the same pods, on the same nodes: nothing recreated"

        final = jobs.wait_phase(custom, namespace, JOB, "Succeeded", timeout=300)
        assert (final["status"]["attempt"], final["status"]["restarts"]) == (2, 2)
        for log in attempt_logs(core, namespace, JOB, 2).values():
            assert re.search(rf"^done step={STEPS}", log, re.M), log
        assert final["status"]["checkpoints"]["latest"]["name"] == f"step-{STEPS}"
    finally:
        core.delete_namespace(namespace)
