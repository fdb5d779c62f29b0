"""Starting and stopping the control-plane processes so that none is ever left behind.

Each process gets its own session (process group). When the cluster belongs to a test session, the
kernel also kills each child when its parent dies (PR_SET_PDEATHSIG), so even a SIGKILLed pytest
leaves nothing running. A detached cluster (`make cluster-up`) is stopped through its state file.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1


# Loaded here, in the parent: between fork and exec a child of a threaded parent must not take locks, and
# dlopen takes the loader's lock. The child then only makes the prctl call.
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)


def _die_with_parent() -> None:
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def start(args: list[str], log_path: Path, die_with_parent: bool,
          env: dict[str, str] | None = None) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            args,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,  # noqa: PLW1509 - PR_SET_PDEATHSIG is set in the child or not at all
        )


def is_alive(pid: int, marker: str) -> bool:
    """True when `pid` runs and its command line contains `marker` (guards against pid reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    state = _proc_state(pid)
    return marker in cmdline and state != "Z"


def _proc_state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat.rsplit(")", 1)[-1].split()[0]


def stop(pid: int, marker: str, grace_seconds: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL it once the grace period runs out."""
    if not is_alive(pid, marker):
        _reap(pid)
        return
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not is_alive(pid, marker):
                return
            time.sleep(0.05)
    if is_alive(pid, marker):
        raise RuntimeError(f"process {pid} survived SIGKILL")


def kill(pid: int, marker: str) -> None:
    """SIGKILL the process group at once, as a machine that loses power would: no chance to clean up."""
    if is_alive(pid, marker):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        _reap(pid)
        if not is_alive(pid, marker):
            return
        time.sleep(0.05)
    raise RuntimeError(f"process {pid} survived SIGKILL")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def pids_with_marker(marker: str) -> list[int]:
    """Every live process whose command line mentions `marker` (used to prove nothing is left)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and is_alive(int(entry.name), marker):
            found.append(int(entry.name))
    return found
