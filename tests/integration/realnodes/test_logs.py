"""`multinode logs` and the client's log streams on real nodes (kwok pods write no logs): every rank's
trainer in one stream, rank selection, and `-f` following a gang restart into the next attempt, with
the earlier attempt's pods read while they still exist."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from localcluster import LocalCluster

from localcluster.harness.kube import new_namespace
from localcluster.harness.waiting import wait_for
from multinode.client import TrainingJobClient
from tests.support import jobs
from tests.support.realnodes import RealClusterSlot, clients, real_job

BIN = Path(sys.executable).parent
# At a restart the operator deletes the old attempt's pods that still run (rank 0 here) and keeps the ones
# that finished (rank 1's failed pod), for their logs: `--attempt 0` reads what is left. (A deleted pod's log
# goes with its container: a finalizer holding the pod object was tried, and the kubelet answered "unable to
# retrieve container logs" once it had removed the container.)

STEPS = textwrap.dedent("""
    import os, time
    rank = os.environ["NODE_RANK"]
    for step in range(3):
        print(f"rank {rank} step {step} loss {1.0 / (step + 1):.3f}", flush=True)
        time.sleep(0.2)
    print(f"rank {rank} done", flush=True)
""")

# Attempt 0: rank 1 fails after a few steps (rank 0 is killed by the restart); attempt 1 runs to the end.
# SIGTERM ends the trainer, as torchrun's agent does: python as the container's PID 1 would ignore it, and the
# kubelet would stop the old attempt's pod only after its 30 s grace period.
RESTARTING = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rank, attempt = os.environ["NODE_RANK"], os.environ["MULTINODE_ATTEMPT"]
    print(f"rank {rank} attempt {attempt} starting", flush=True)
    for step in range(3):
        print(f"rank {rank} attempt {attempt} step {step}", flush=True)
        time.sleep(1)
    if attempt == "0":
        if rank == "1":
            print("rank 1 attempt 0: simulated CUDA error, exiting 1", flush=True)
            sys.exit(1)
        time.sleep(120)
    print(f"rank {rank} attempt {attempt} done", flush=True)
""")


def cli(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig), PATH=f"{BIN}:{os.environ['PATH']}", NO_COLOR="1")
    return subprocess.run(["multinode", *args], check=False, capture_output=True, text=True, timeout=180, env=env)



def test_every_rank_in_one_stream_and_only_the_ranks_asked_for(operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    _, custom = clients(cluster)
    custom.create_namespaced_custom_object("multinode.dev", "v1alpha1", namespace, "trainingjobs",
                                           real_job("hello", 2, STEPS))
    jobs.wait_phase(custom, namespace, "hello", "Succeeded", timeout=180)

    every = cli(cluster, "logs", "hello", "-n", namespace)
    assert every.returncode == 0, every.stderr
    expected = [f"[rank {r}] rank {r} step {s} loss {1.0 / (s + 1):.3f}" for r in (0, 1) for s in range(3)]
    lines = every.stdout.splitlines()
    assert [line for line in lines if " step " in line] == expected
    assert "[rank 0] rank 0 done" in lines and "[rank 1] rank 1 done" in lines
    print("\n$ multinode logs hello\n" + every.stdout)  # docs/user-guide.md quotes this run's output

    one = cli(cluster, "logs", "hello", "-n", namespace, "--rank", "1", "--tail", "2")
    assert one.stdout.splitlines() == ["[rank 1] rank 1 step 2 loss 0.333", "[rank 1] rank 1 done"]

    bounded = cli(cluster, "logs", "hello", "-n", namespace, "--max-streams", "1")
    assert {line.split("]")[0] for line in bounded.stdout.splitlines()} == {"[rank 0"}
    assert "showing 1 of 2 ranks (the leader, failing and not running ranks first)" in bounded.stderr
    print("\n$ multinode logs hello --max-streams 1\n" + bounded.stderr + bounded.stdout)

    as_json = cli(cluster, "logs", "hello", "-n", namespace, "--rank", "1", "-o", "json")
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert objects[0] == {"rank": 1, "attempt": 0, "pod": "hello-1-a0", "text": "rank 1 step 0 loss 1.000"}
    assert len(objects) == 4

    # The same from Python, as a notebook reads it.
    jobs_client = TrainingJobClient(namespace, kubeconfig=str(cluster.kubeconfig))
    texts = [(line.rank, line.text) for line in jobs_client.logs("hello", ranks=[0])]
    assert texts[0] == (0, "rank 0 step 0 loss 1.000") and texts[-1] == (0, "rank 0 done")


@dataclass
class Followed:
    cluster: LocalCluster
    namespace: str
    result: subprocess.CompletedProcess
    seconds: float


@pytest.fixture(scope="module")
def followed_restart(real_slot: RealClusterSlot) -> Iterator[Followed]:
    """`multinode logs -f` started with the job, before any pod exists, run to its own end. Module-scoped:
    two tests judge one run."""
    cluster, _ = real_slot.operator()
    core, custom = clients(cluster)
    namespace = new_namespace(core, prefix="reallogs")
    body = real_job("flaky", 2, RESTARTING, failurePolicy={"maxRestarts": 2, "restartStrategy": "Recreate",
                                                           "backoff": {"initialSeconds": 0}})
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig), PATH=f"{BIN}:{os.environ['PATH']}", NO_COLOR="1")
    started = time.monotonic()
    follower = subprocess.Popen(["multinode", "logs", "flaky", "-n", namespace, "-f"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
    try:
        custom.create_namespaced_custom_object("multinode.dev", "v1alpha1", namespace, "trainingjobs", body)
        stdout, stderr = follower.communicate(timeout=240)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    result = subprocess.CompletedProcess(follower.args, follower.returncode, stdout, stderr)
    yield Followed(cluster, namespace, result, time.monotonic() - started)
    core.delete_namespace(namespace)


def test_follow_picks_up_the_next_attempt_and_ends_with_the_job(followed_restart: Followed) -> None:
    result = followed_restart.result
    assert result.returncode == 0, result.stderr
    _, custom = clients(followed_restart.cluster)
    job = jobs.get_job(custom, followed_restart.namespace, "flaky")
    assert job["status"]["phase"] == "Succeeded" and job["status"]["attempt"] == 1
    lines = result.stdout.splitlines()
    print("\n$ multinode logs flaky -f\n" + result.stderr + result.stdout)
    # Attempt 0 from both ranks, before any restart: rank only. Then attempt 1's pods, picked up by -f.
    assert "[rank 1] rank 1 attempt 0: simulated CUDA error, exiting 1" in lines
    assert "[rank 0] rank 0 attempt 0 step 2" in lines
    for rank in (0, 1):
        assert f"[rank {rank} attempt 1] rank {rank} attempt 1 starting" in lines
        assert f"[rank {rank} attempt 1] rank {rank} attempt 1 done" in lines
        mine = [line for line in lines if line.startswith(f"[rank {rank} attempt 1]")]
        assert mine == sorted(mine, key=lambda line: ("starting" not in line, "done" in line, line))
    assert "multinode logs: attempt 1 started" in result.stderr
    assert followed_restart.seconds < 200


def test_an_earlier_attempt_is_read_while_its_pods_exist(followed_restart: Followed) -> None:
    cluster, namespace = followed_restart.cluster, followed_restart.namespace
    core, _ = clients(cluster)

    def attempt_0() -> dict:
        pods = core.list_namespaced_pod(namespace).items
        return {p.metadata.name: p for p in pods if p.metadata.name.endswith("-a0")}

    # The running rank's pod was deleted at the restart (Recreate does not wait for it to be gone, so the job
    # may finish while it terminates); the failed rank's pod stays, for its logs.
    assert all(p.metadata.deletion_timestamp is not None for name, p in attempt_0().items() if name != "flaky-1-a0")
    left = wait_for(lambda: sorted(attempt_0()) == ["flaky-1-a0"] and attempt_0(), timeout=60,
                    what="only the failed rank's pod of attempt 0 left")
    assert left["flaky-1-a0"].metadata.deletion_timestamp is None

    earlier = cli(cluster, "logs", "flaky", "-n", namespace, "--attempt", "0")
    assert earlier.returncode == 0, earlier.stderr
    assert earlier.stdout.splitlines() == ["[rank 1] rank 1 attempt 0 starting"] + [
        f"[rank 1] rank 1 attempt 0 step {s}" for s in range(3)] + [
        "[rank 1] rank 1 attempt 0: simulated CUDA error, exiting 1"]

    every = cli(cluster, "logs", "flaky", "-n", namespace, "--all-attempts")
    assert every.returncode == 0, every.stderr
    lines = every.stdout.splitlines()
    print("\n$ multinode logs flaky --all-attempts\n" + every.stdout)
    assert lines[0] == "[rank 1 attempt 0] rank 1 attempt 0 starting"
    assert "[rank 1 attempt 0] rank 1 attempt 0: simulated CUDA error, exiting 1" in lines
    assert lines[-1] == "[rank 1 attempt 1] rank 1 attempt 1 done"
    assert "[rank 0 attempt 1] rank 0 attempt 1 done" in lines

    status = cli(cluster, "status", "flaky", "-n", namespace)
    print("\n$ multinode status flaky\n" + status.stdout)
    history = status.stdout.splitlines()[status.stdout.splitlines().index("Restart history:") + 2]
    assert history.split()[:3] == ["0", "PodFailed", "yes"] and "flaky-1-a0" in history

    gone = cli(cluster, "logs", "flaky", "-n", namespace, "--attempt", "7")
    assert gone.returncode == 1
    assert "no pods of attempt 7 left" in gone.stderr
