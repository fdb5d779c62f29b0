"""The typed client and `multinode status` / `wait` against the real apiserver and the session operator
(kwok nodes: pods run by stage, so these judge the control plane's side; logs are judged on real nodes,
tests/integration/realnodes/test_logs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from multinode.api import TrainingJob
from multinode.client import JobEnded, TrainingJobClient, WaitTimeout
from tests.support.cli import cli
from tests.support.jobs import EXIT_CODE, FINISH_AFTER

FAST = {"backoff": {"initialSeconds": 0}}


def fail_pod(core: client.CoreV1Api, namespace: str, pod: str, exit_code: int) -> None:
    core.patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": {FINISH_AFTER: "0s",
                                                                            EXIT_CODE: str(exit_code)}}})


def test_a_notebook_user_creates_waits_reads_and_deletes_a_job(kubeconfig: str, job_namespace: str) -> None:
    jobs = TrainingJobClient(job_namespace, kubeconfig=kubeconfig)
    model = TrainingJob.model_validate(training_job("nb", 2))
    created = jobs.create(model)
    assert created.metadata.uid and created.spec.num_nodes == 2

    seen: list[str] = []
    running = jobs.wait("nb", phases=["Running"], timeout=60,
                        on_progress=lambda job: seen.append(job.status.phase.value if job.status and job.status.phase
                                                            else "-"))
    assert isinstance(running, TrainingJob) and running.status is not None
    assert running.status.phase == "Running" and running.status.ready == "2/2"
    assert seen[-1] == "Running" and len(seen) >= 1

    got = jobs.get("nb")
    assert [n.phase for n in got.status.node_statuses] == ["Running", "Running"]  # type: ignore[union-attr]
    assert jobs.status("nb")["ready"] == "2/2"
    pods = jobs.pods("nb")
    assert list(pods) == [0] and [(p.rank, p.name, p.phase) for p in pods[0]] == [
        (0, "nb-0-a0", "Running"), (1, "nb-1-a0", "Running")]
    assert [j.metadata.name for j in jobs.list()] == ["nb"]

    jobs.delete("nb", wait=True, timeout=60)
    assert jobs.list() == []


def test_create_from_yaml_and_a_wait_that_cannot_succeed(core: client.CoreV1Api, kubeconfig: str,
                                                         job_namespace: str, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(training_job("fromfile", 1, failurePolicy={"maxRestarts": 0})))
    jobs = TrainingJobClient(job_namespace, kubeconfig=kubeconfig)
    [created] = jobs.create_from_yaml(path)
    assert created.metadata.name == "fromfile" and created.metadata.namespace == job_namespace

    with pytest.raises(WaitTimeout) as timed_out:
        jobs.wait("fromfile", phases=["Succeeded"], timeout=1.5)
    assert "not phase Succeeded after 1.5s" in str(timed_out.value)

    jobs.wait("fromfile", condition="Running", timeout=60)
    fail_pod(core, job_namespace, "fromfile-0-a0", 2)
    with pytest.raises(JobEnded) as finished:
        jobs.wait("fromfile", phases=["Succeeded"], timeout=60)
    assert finished.value.job.status is not None and finished.value.job.status.phase == "Failed"


def test_status_describes_a_restarted_job_and_prints_it_as_json(core: client.CoreV1Api, kubeconfig: str,
                                                                job_namespace: str) -> None:
    jobs = TrainingJobClient(job_namespace, kubeconfig=kubeconfig)
    jobs.create(training_job("desc", 3, failurePolicy=FAST))
    jobs.wait("desc", phases=["Running"], timeout=60)
    fail_pod(core, job_namespace, "desc-2-a0", 1)
    wait_for(lambda: (jobs.status("desc").get("attempt") == 1 and jobs.status("desc").get("phase") == "Running"),
             timeout=60, what="attempt 1 Running")

    out = cli(kubeconfig, "status", "desc", "-n", job_namespace)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "Phase:         Running" in lines and "Ready:         3/3" in lines
    assert "Attempt:       1 (restarts: 1 counted, 0 uncounted)" in lines
    assert any(line.split()[:3] == ["Running", "True", "AllNodesRunning"] for line in lines), out.stdout
    assert "  INDEX   POD         NODE" in out.stdout and "desc-2-a1" in out.stdout
    history = lines[lines.index("Restart history:") + 2].split()
    assert history[:3] == ["0", "PodFailed", "yes"] and "desc-2-a0" in lines[lines.index("Restart history:") + 2]

    # The alias, through kubectl's plugin mechanism, as JSON.
    as_json = cli(kubeconfig, "multinode", "describe", "desc", "-n", job_namespace, "-o", "json", command="kubectl")
    assert as_json.returncode == 0, as_json.stderr
    obj = json.loads(as_json.stdout)
    assert obj["status"]["restarts"] == 1 and "managedFields" not in obj["metadata"]
    assert yaml.safe_load(cli(kubeconfig, "status", "desc", "-n", job_namespace, "-o", "yaml").stdout) == obj

    missing = cli(kubeconfig, "status", "nope", "-n", job_namespace)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f'error: TrainingJob "nope" not found in namespace "{job_namespace}"'

    # Job names complete from the cluster.
    done = cli(kubeconfig, "__complete", "de", "logs", "-n", job_namespace)
    assert done.stdout.split() == ["desc"]


def test_wait_prints_progress_on_stderr_and_the_result_on_stdout(core: client.CoreV1Api, kubeconfig: str,
                                                                 job_namespace: str) -> None:
    jobs = TrainingJobClient(job_namespace, kubeconfig=kubeconfig)
    jobs.create(training_job("waited", 2))
    jobs.wait("waited", phases=["Running"], timeout=60)
    for pod in ("waited-0-a0", "waited-1-a0"):
        core.patch_namespaced_pod(pod, job_namespace, {"metadata": {"annotations": {FINISH_AFTER: "0s"}}})
    out = cli(kubeconfig, "wait", "waited", "-n", job_namespace, "--for", "phase=Succeeded", "--timeout", "60")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "trainingjob/waited phase=Succeeded\n"
    assert out.stderr.splitlines()[-1].startswith("waited: Succeeded, ")
