"""The `multinode` command as a user runs it, against a test cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def cli(kubeconfig: str, *args: str, command: str = "multinode") -> subprocess.CompletedProcess:
    """Run the venv's `multinode` (or `command`) with KUBECONFIG set and colour off; never raises on exit code."""
    env = dict(os.environ, KUBECONFIG=kubeconfig, PATH=f"{BIN}:{os.environ['PATH']}", NO_COLOR="1")
    return subprocess.run([command, *args], check=False, capture_output=True, text=True, timeout=120, env=env)
