"""Faults the tests and the demo inject into real pods."""

from __future__ import annotations


def kill_worker_script(script_path: str, launcher: str = "torch.distributed.run") -> str:
    """Python for `kubectl exec … -- python3 -c`: SIGKILL the training processes running `script_path`,
    not their launcher. The launcher is the container's PID 1, which ignores signals it has no handler for;
    it sees its worker die and exits non-zero, as when a rank crashes. Prints `killed <pid>` for each."""
    return ("import os, signal\n"
            "for p in filter(str.isdigit, os.listdir('/proc')):\n"
            "    cmd = open(f'/proc/{p}/cmdline', 'rb').read()\n"
            f"    if {script_path.encode()!r} in cmd and {launcher.encode()!r} not in cmd:\n"
            "        os.kill(int(p), signal.SIGKILL); print('killed', p)\n")
