"""examples/real/train.py for real: two torchrun launchers on loopback, as two node pods run it.

Each launcher gets the env the operator renders for its node (render_node_pod and its attempt's ConfigMap), so a bare
`python -m torch.distributed.run train.py` has to find the gang from the PET_* variables alone. Only
the leader's DNS name is swapped for 127.0.0.1. Torch comes from the host-built trainer env, the folder
real-node pods mount; the first run on a machine installs it (about 5 GB, a few minutes).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from localcluster.trainerenv import INSTALL_TIMEOUT_SECONDS, ensure_trainer_env

from multinode.testing import stored_job
from multinode.testing import node_env as rendered_env
from tests.support.paths import REPO

TRAIN = REPO / "examples" / "real" / "train.py"
NODES = 2
RUN_TIMEOUT = 300  # importing torch alone takes seconds per process on 2 cores

# The first test may install the trainer env, and pytest-timeout counts fixture setup.
pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_SECONDS + 2 * RUN_TIMEOUT)


@pytest.fixture(scope="module")
def trainer_env() -> Path:
    return ensure_trainer_env()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_env(tmp_path: Path, index: int, port: int, resume_from: str) -> dict[str, str]:
    job = stored_job(NODES, name="real", uid="uid-1", image="debian:bookworm", network={"rendezvousPort": port},
                     cache={"claimName": "cache", "mountPath": str(tmp_path / "cache")},
                     checkpointing={"claimName": "backup", "mountPath": str(tmp_path / "mirror")})
    env = {var["name"]: var["value"] for var in rendered_env(job, index, 0, resume_from=resume_from)
           if "value" in var}  # the downward-API ones (pod and node name) only exist in a pod
    env["MASTER_ADDR"] = env["PET_MASTER_ADDR"] = "127.0.0.1"  # instead of real-0.real.ml.svc
    return env


def run_gang(tmp_path: Path, trainer_env: Path, name: str, steps: int, resume_from: str = "") -> list[str]:
    """Runs NODES launchers to the end; returns each node's output (launcher and worker)."""
    port = free_port()
    procs, logs = [], []
    for index in range(NODES):
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_"))},
            **node_env(tmp_path, index, port, resume_from),
            "PYTHONPATH": str(trainer_env),
            "GLOO_SOCKET_IFNAME": "lo",  # gloo otherwise binds to the address the hostname resolves to
            "TRAIN_STEPS": str(steps), "CHECKPOINT_EVERY": "3",
        }
        log = tmp_path / f"{name}-node{index}.log"
        logs.append(log)
        with log.open("w") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", str(TRAIN)],
                env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.monotonic() + RUN_TIMEOUT  # one deadline for the gang: they run together
    try:
        for proc in procs:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass  # the asserts below show what each node printed before it was killed
    finally:
        for proc in procs:  # the launcher and its workers share a session: end them all
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    outputs = [log.read_text() for log in logs]
    for index, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"node {index} exited {proc.returncode}:\n{out}"
    return outputs


def losses(output: str) -> dict[tuple[int, int], str]:
    """{(rank, step): loss as printed}; each step printed once per rank."""
    found = re.findall(r"^step=(\d+) rank=(\d+) loss=(\S+)$", output, re.M)
    by_step = {(int(rank), int(step)): loss for step, rank, loss in found}
    assert len(by_step) == len(found), output
    return by_step


def test_trains_checkpoints_and_resumes_across_two_nodes(tmp_path: Path, trainer_env: Path) -> None:
    ckpt_dir = tmp_path / "cache" / "real"  # MULTINODE_CHECKPOINT_DIR: <cache mountPath>/<job>
    ckpt_dir.mkdir(parents=True)  # the preflight init container creates it in a pod

    # 9 steps, so the resumed run below can be compared with an uninterrupted one.
    first = run_gang(tmp_path, trainer_env, "first", steps=9)
    for rank, out in enumerate(first):  # one process per node, so node i runs rank i
        assert "allreduce_sum=1 expected=1" in out, out
        assert sorted(losses(out)) == [(rank, step) for step in range(1, 10)], out
        assert f"done step=9 rank={rank}" in out, out
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step-3", "step-6", "step-9"]
    for name in ("step-3", "step-6", "step-9"):
        assert (ckpt_dir / name / ".metadata").is_file(), name
        assert sorted(p.name for p in (ckpt_dir / name).glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]

    # A gang restart after step 9 whose newest mirrored checkpoint is step 6.
    resume_from = str(ckpt_dir / "step-6")
    second = run_gang(tmp_path, trainer_env, "second", steps=9, resume_from=resume_from)
    for rank, (out, before) in enumerate(zip(second, first, strict=True)):
        assert f"resumed_from={resume_from} step=6 rank={rank}" in out, out
        resumed = losses(out)
        assert sorted(resumed) == [(rank, 7), (rank, 8), (rank, 9)], out
        assert f"done step=9 rank={rank}" in out, out
        assert "existing checkpoint" not in out, out  # the old step-9 was removed before the re-save
        # Same data, same weights and Adam state as at step 6, so the same losses to the last digit;
        # a model or optimizer state that did not load would change them.
        assert resumed == {key: loss for key, loss in losses(before).items() if key[1] > 6}
