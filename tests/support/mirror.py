"""`multinode mirror` as a job's mirror pod runs it, as a local process (kwok runs no containers)."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from localcluster.harness.operator import _free_port


def write_checkpoint(root: Path, name: str, shards: int = 4, size: int = 64 * 1024) -> None:
    """A complete checkpoint in the seeds' layout: rank shards and a COMPLETE marker."""
    d = root / name
    d.mkdir(parents=True)
    for rank in range(shards):
        (d / f"rank_{rank:05d}.pt").write_bytes(os.urandom(size))
    (d / "COMPLETE").write_text("")


class MirrorProcess:
    """Runs with `kubeconfig` (the mirror ServiceAccount's token, as in the pod), fast intervals."""

    def __init__(self, kubeconfig: str, namespace: str, job: str, source: Path, dest: Path, log: Path,
                 *extra_args: str):
        self.metrics_port = _free_port()
        args = [sys.executable, "-m", "multinode.cli.main", "mirror", "--source", str(source), "--dest", str(dest),
                "--job", job, "--namespace", namespace, "--keep", "2", "--interval", "0.2", "--settle", "0",
                "--metrics-port", str(self.metrics_port), "--metrics-address", "127.0.0.1", *extra_args]
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(args, env=dict(os.environ, KUBECONFIG=kubeconfig),
                                         stdout=out, stderr=subprocess.STDOUT)

    def metrics(self) -> dict[str, float]:
        return {s.name: s.value for s in self._samples()}

    def metric(self, name: str, **labels: str) -> float | None:
        """The value of the sample `name` with exactly these labels, or None."""
        return next((s.value for s in self._samples() if s.name == name and s.labels == labels), None)

    def _samples(self) -> list:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return [s for family in text_string_to_metric_families(text) for s in family.samples]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
