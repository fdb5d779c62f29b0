"""A real slow link for a pod on a real node: a tc token-bucket filter (sch_tbf) on both ends of its veth.

A pod on a real node reaches the others through a veth pair: `eth0` in the pod's network namespace, its peer
on the host attached to the node's CNI bridge. A qdisc shapes what a device sends, so the pod's two
directions need one each: on the host end (traffic into the pod) and on `eth0` inside the pod's namespace
(traffic out of it), entered with nsenter through one of the pod's processes. `shaped_pod_link` undoes both
on exit, whether or not the pod still exists (its veth, and the qdiscs with it, go when the pod is deleted).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from localcluster.harness.waiting import wait_for


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30).stdout


def find_pid(*environ: str, command: str) -> int | None:
    """A process whose command line contains `command` and whose environment holds every `NAME=value`."""
    wanted = {item.encode() for item in environ}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if command.encode() not in (proc / "cmdline").read_bytes():
                continue
            if wanted <= set((proc / "environ").read_bytes().split(b"\0")):
                return int(proc.name)
        except OSError:
            continue  # gone, or a kernel thread
    return None


def host_veth(pid: int) -> str:
    """The host end of the veth whose pod end is `eth0` in the network namespace of `pid`."""
    line = _run("nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show", "eth0")
    match = re.search(r"eth0@if(\d+)", line)
    assert match, line
    peer = match.group(1)
    for entry in _run("ip", "-o", "link", "show").splitlines():
        index, name = entry.split(":")[0:2]
        if index.strip() == peer:
            return name.strip().split("@")[0]
    raise AssertionError(f"no host link with index {peer}")


def _tbf(rate: str) -> list[str]:
    # burst must hold at least one MTU-sized packet at this rate; latency bounds the queue.
    return ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]


def qdiscs(device: str, pid: int | None = None) -> str:
    prefix = ["nsenter", "-t", str(pid), "-n"] if pid is not None else []
    return _run(*prefix, "tc", "qdisc", "show", "dev", device)


@contextmanager
def shaped_pod_link(pid: int, rate: str) -> Iterator[str]:
    """Both directions of the pod's link (its process `pid`) shaped to `rate` (tc syntax, e.g. 10mbit);
    yields the host veth's name."""
    veth = host_veth(pid)
    subprocess.run(["tc", "qdisc", "add", "dev", veth, *_tbf(rate)], check=True, timeout=30)
    try:
        subprocess.run(["nsenter", "-t", str(pid), "-n", "tc", "qdisc", "add", "dev", "eth0", *_tbf(rate)],
                       check=True, timeout=30)
        try:
            yield veth
        finally:
            # Fails only when the pod is gone, and its namespace with it.
            subprocess.run(["nsenter", "-t", str(pid), "-n", "tc", "qdisc", "del", "dev", "eth0", "root"],
                           capture_output=True, timeout=30, check=False)
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], capture_output=True, timeout=30, check=False)
        wait_for(lambda: not _link_exists(veth) or "tbf" not in qdiscs(veth), timeout=10,
                 what=f"the tbf qdisc on {veth} removed")


def _link_exists(device: str) -> bool:
    return subprocess.run(["ip", "link", "show", device], capture_output=True, timeout=30, check=False).returncode == 0
