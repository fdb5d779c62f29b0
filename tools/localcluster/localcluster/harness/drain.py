"""`kubectl drain` as an admin runs it, in the background: a test or benchmark starts it, watches the job
meanwhile, and reads how it ended. The node is uncordoned afterwards, whatever happened."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from localcluster.harness.kube import kubectl

# kubectl drain's own words when a PodDisruptionBudget refuses an eviction (it retries every 5 s).
BUDGET_REFUSED = "disruption budget"


@dataclass
class Drain:
    node: str
    process: subprocess.Popen
    output_file: str

    def wait(self, timeout: float) -> tuple[int, str]:
        """(exit code, stdout and stderr) once the drain ended; raises subprocess.TimeoutExpired after
        `timeout` seconds."""
        code = self.process.wait(timeout=timeout)
        return code, self.output()

    def output(self) -> str:
        with open(self.output_file, encoding="utf-8", errors="replace") as f:
            return f.read()


@contextmanager
def draining(kubeconfig: str, node: str, timeout_seconds: int = 300) -> Iterator[Drain]:
    """`kubectl drain NODE` running in the background (DaemonSets ignored, emptyDir data and bare pods
    deleted, as a node-maintenance runbook does), for at most `timeout_seconds`; stopped and the node
    uncordoned on exit."""
    fd, output_file = tempfile.mkstemp(prefix=f"drain-{node}-", suffix=".log")
    env = dict(os.environ, KUBECONFIG=kubeconfig)
    with os.fdopen(fd, "w") as out:
        process = subprocess.Popen(["kubectl", "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                                    "--force", f"--timeout={timeout_seconds}s"],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield Drain(node, process, output_file)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        kubectl(kubeconfig, "uncordon", node, check=False)
        os.unlink(output_file)
