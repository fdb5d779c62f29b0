"""Running a real framework's writer with two ranks on CPU (torchrun, gloo), rank 1 held back by a gate.

The frameworks (HF Transformers, Accelerate, DeepSpeed) come from the cached frameworks env, layered on
the torch trainer env (localcluster.frameworksenv). A writer script holds rank 1 just before it writes its
own file until the test creates the gate file: the mirror then meets the checkpoint as it would meet a
slow rank's, with rank 0's marker written and rank 1's file missing.
"""

from __future__ import annotations

import json
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from localcluster.frameworksenv import process_env
from localcluster.harness.waiting import wait_for

from multinode.checkpoints.manifest import MANIFEST_NAME

# Two ranks importing torch, transformers and deepspeed on 2 shared cores: 134 s seen unloaded, over 180 s
# under load.
WAIT_SECONDS = 420
# The variable that marks a writer's processes (two_ranks).
WRITER_MARK = "MULTINODE_TEST_WRITER"


def frameworks_env() -> dict[str, str]:
    return dict(os.environ, **process_env(), PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")


def published_files(published: Path) -> set[str]:
    """The files a published checkpoint's manifest lists."""
    return {f["path"] for f in json.loads((published / MANIFEST_NAME).read_text())["files"]}


class Writer:
    def __init__(self, proc: subprocess.Popen, log: Path, gate: Path) -> None:
        self.proc, self.log, self.gate = proc, log, gate

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        """Until `condition()` holds; fails at once if the writer exits first."""
        deadline = time.monotonic() + WAIT_SECONDS
        while not condition():
            assert self.proc.poll() is None, f"the writer exited ({self.proc.returncode}) before {what}:\n" \
                                             f"{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} after {WAIT_SECONDS}s:\n{self.output()[-3000:]}"
            time.sleep(0.1)

    def release(self) -> None:
        """Let rank 1 write its file; the save and the run must then finish cleanly."""
        self.gate.touch()
        assert self.proc.wait(timeout=WAIT_SECONDS) == 0, self.output()[-3000:]


@contextmanager
def two_ranks(script: str, args: list[str], env: dict[str, str], workdir: Path) -> Iterator[Writer]:
    """Runs `script` under torchrun with 2 processes; its last argument is the gate file's path."""
    (workdir / "writer.py").write_text(script)
    gate, log = workdir / "gate", workdir / "writer.log"
    # Every process of this run carries the mark in its environment: torchrun starts each rank in a session of
    # its own, so neither its process group nor its children (orphaned once torchrun dies) find them all.
    mark = f"{WRITER_MARK}={uuid.uuid4().hex}"
    name, _, value = mark.partition("=")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                 "2", str(workdir / "writer.py"), *args, str(gate)],
                                env={**env, name: value}, stdout=out, stderr=subprocess.STDOUT, cwd=workdir,
                                start_new_session=True)
    try:
        yield Writer(proc, log, gate)
    finally:
        gate.touch()   # never leave rank 1 waiting
        kill_marked(mark.encode())
        proc.wait()
        wait_for(lambda: not marked_pids(mark.encode()), timeout=30, what="every process of the writer gone")


def marked_pids(mark: bytes) -> list[int]:
    """The processes whose environment holds `mark` (NAME=value)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            zombie = (entry / "stat").read_text().rsplit(") ", 1)[-1].startswith("Z")   # gone, not yet reaped
            if not zombie and mark in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def kill_marked(mark: bytes) -> None:
    for pid in marked_pids(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
