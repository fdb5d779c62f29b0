"""The real example (examples/real/) on real nodes: torchrun forms its world from the operator's env alone,
the all-reduce is right on every rank, DCP checkpoints are mirrored, a SIGKILLed rank restarts the gang,
which resumes from the mirrored checkpoint, and the job succeeds."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from kubernetes import client
from localcluster import LocalCluster
from localcluster.faults import kill_worker_script

from tests.support import jobs
from localcluster.harness import realexample
from localcluster.harness.kube import allow_host_path, kubectl, new_namespace
from tests.support.realnodes import attempt_logs, clients
from localcluster.harness.waiting import wait_for

EXAMPLE = realexample.EXAMPLE_DIR
JOB = "real-train"
KILL_WORKER = kill_worker_script("/app/train.py")


def _status(custom: client.CustomObjectsApi, namespace: str) -> dict:
    return jobs.get_job(custom, namespace, JOB).get("status") or {}



def _steps(log: str) -> list[int]:
    return [int(m) for m in re.findall(r"^step=(\d+) rank=\d+ loss=", log, re.M)]


def test_the_real_example_trains_survives_a_killed_rank_and_resumes(
        real_operator: tuple[LocalCluster, str], tmp_path: Path) -> None:
    cluster, _ = real_operator
    core, custom = clients(cluster)
    namespace = new_namespace(core, prefix="realtrain")
    allow_host_path(core, namespace)  # the example mounts torch from the host
    kc = str(cluster.kubeconfig)
    try:
        # As a user applies it: the trainer image from the cluster's registry (envsubst fills in the address).
        kubectl(kc, "apply", "-n", namespace, "-f", str(realexample.write_manifests(cluster.registry, tmp_path)))

        # Rendezvous from the env alone: both ranks train, and the all-reduce sum of the ranks is right.
        def both_training(attempt: int):
            logs = attempt_logs(core, namespace, JOB, attempt)
            return logs if len(logs) == 2 and all(_steps(log) for log in logs.values()) else None

        logs = wait_for(lambda: both_training(0), timeout=300, what="both ranks of attempt 0 to log steps")
        for log in logs.values():
            assert re.search(r"^allreduce_sum=1 expected=1", log, re.M), log

        # The mirror publishes a complete DCP checkpoint and the status names it.
        latest = wait_for(lambda: (_status(custom, namespace).get("checkpoints") or {}).get("latest"),
                          timeout=180, what="a mirrored checkpoint in status.checkpoints.latest")
        assert re.fullmatch(r"step-\d+", latest["name"]), latest

        # SIGKILL rank 1's training process: torchrun exits, the pod fails, the gang restarts.
        killed = kubectl(kc, "exec", "-n", namespace, f"{JOB}-1-a0", "--", "python3", "-c", KILL_WORKER).stdout
        assert killed.startswith("killed"), killed
        status = wait_for(lambda: _status(custom, namespace) if _status(custom, namespace).get("attempt") == 1
                          else None, timeout=180, what="the gang restart (attempt 1)")
        resumed = wait_for(lambda: _status(custom, namespace).get("resumedFrom"), timeout=60,
                           what="status.resumedFrom")
        resumed_step = int(re.search(r"step-(\d+)", resumed).group(1))
        assert status["restartHistory"][-1]["attempt"] == 0

        logs = wait_for(lambda: both_training(1), timeout=300, what="both ranks of attempt 1 to log steps")
        for log in logs.values():
            assert f"resumed_from={resumed}" in log
            assert _steps(log)[0] == resumed_step + 1  # training goes on from the checkpoint

        final = jobs.wait_phase(custom, namespace, JOB, "Succeeded", timeout=300)
        steps = int(yaml.safe_load((EXAMPLE / "trainingjob.yaml").read_text())["spec"]["env"][1]["value"])
        for log in attempt_logs(core, namespace, JOB, 1).values():
            assert re.search(rf"^done step={steps}", log, re.M), log
        assert final["status"]["checkpoints"]["latest"]["name"] == f"step-{steps}"
    finally:
        core.delete_namespace(namespace)
