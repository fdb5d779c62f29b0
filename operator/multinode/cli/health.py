"""The node health check `multinode preflight` runs before it waits for peers (spec.healthCheck).

It checks what the job asked of the node, from inside a container that was given the same devices as the
trainer (the renderer puts the trainer's GPU and RDMA limits on the preflight container; the kubelet's
device manager hands the devices an init container got to the pod's app containers, so both see the same
ones):

- GPUs: every source of GPU visibility present shows at least the requested count. Sources are the device
  plugin's NVIDIA_VISIBLE_DEVICES (a list of IDs; `all` says nothing about the count and is skipped),
  `/dev/nvidiaN` device nodes (only when `/dev/nvidiactl` exists, i.e. a real driver is mounted in), and
  `nvidia-smi -L` when it is on PATH. With no source at all, no GPU is visible and the check fails. The
  local cluster's fake device plugin only sets the env; a real GPU node has all three.
- RDMA: `/dev/infiniband/uverbs*` devices (what RDMA device plugins mount), or, when there are none, the
  IDs in the env var `--rdma-env` names (SR-IOV plugins' PCIDEVICE_<RESOURCE>, the local fake plugin's
  MULTINODE_FAKE_RDMA_DEVICES), at least the requested count; and RLIMIT_MEMLOCK unlimited, at least the
  floor, or lifted by CAP_IPC_LOCK.
- /dev/shm: its filesystem holds at least shmSize.

The checks are pure functions of `NodeFacts`; `gather` reads the facts from the running system.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from multinode.api.health import HealthReason, HealthStatus

GPU_ENV = "NVIDIA_VISIBLE_DEVICES"
# CAP_IPC_LOCK's bit in /proc/self/status CapEff (linux/capability.h).
CAP_IPC_LOCK_BIT = 14
UNLIMITED = -1
_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
             "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 10**-3}


@dataclass(frozen=True)
class HealthRequest:
    """What the job asked of this node (the renderer passes it as arguments)."""

    gpus: int = 0
    rdma: int = 0
    rdma_env: str | None = None
    memlock_floor: int = 0
    shm_bytes: int | None = None

    @property
    def empty(self) -> bool:
        return not self.gpus and not self.rdma and self.shm_bytes is None


@dataclass(frozen=True)
class NodeFacts:
    env: Mapping[str, str] = field(default_factory=dict)
    nvidia_ctl: bool = False
    nvidia_devices: int = 0
    nvidia_smi_gpus: int | None = None
    uverbs_devices: int = 0
    memlock: int = UNLIMITED  # soft RLIMIT_MEMLOCK in bytes, UNLIMITED for RLIM_INFINITY
    cap_ipc_lock: bool = False
    shm_bytes: int | None = None  # size of /dev/shm's filesystem, None when it is missing


@dataclass(frozen=True)
class HealthVerdict:
    """What the node's health check found (the job's verdict is reconcile's Verdict)."""

    status: HealthStatus
    reason: str
    message: str


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes quantity ("16Mi", "1G", "1e9") in bytes, rounded up."""
    match = re.fullmatch(r"([0-9.]+)([eE][-+]?[0-9]+|[KMGTPE]i|[kMGTPEm])?", quantity.strip())
    if match is None:
        raise ValueError(f"not a quantity: {quantity!r}")
    number, suffix = match.groups()
    if suffix and suffix[0] in "eE":
        value = float(number + suffix)
    else:
        value = float(number) * _SUFFIXES.get(suffix or "", 1)
    return int(-(-value // 1))


def _ids(value: str) -> list[str]:
    return [item for item in value.split(",") if item.strip()]


def check_gpus(want: int, facts: NodeFacts) -> str | None:
    """A failure message, or None when every source shows at least `want` GPUs."""
    seen: dict[str, int] = {}
    env = facts.env.get(GPU_ENV)
    if env is not None and env.strip() != "all":
        ids = [] if env.strip() in ("none", "void") else _ids(env)
        seen[f"{GPU_ENV}={env or '(empty)'}"] = len(ids)
    if facts.nvidia_ctl:
        seen["/dev/nvidiaN devices"] = facts.nvidia_devices
    if facts.nvidia_smi_gpus is not None:
        seen["nvidia-smi -L"] = facts.nvidia_smi_gpus
    if not seen:
        return (f"{want} GPUs requested, none visible: {GPU_ENV} is unset (or 'all'), there is no "
                "/dev/nvidiactl and no nvidia-smi")
    short = {source: count for source, count in seen.items() if count < want}
    if short:
        return f"{want} GPUs requested, fewer visible: " + "; ".join(f"{n} in {s}" for s, n in short.items())
    return None


def check_rdma(want: int, env_name: str | None, facts: NodeFacts) -> str | None:
    if facts.uverbs_devices >= want:
        return None
    found = [f"{facts.uverbs_devices} /dev/infiniband/uverbs* devices"]
    if env_name:
        ids = _ids(facts.env.get(env_name, ""))
        if len(ids) >= want:
            return None
        found.append(f"{len(ids)} IDs in {env_name}")
    return f"{want} RDMA devices requested, found " + " and ".join(found)


def check_memlock(floor: int, facts: NodeFacts) -> str | None:
    # CAP_IPC_LOCK lets a process pin memory past RLIMIT_MEMLOCK, which is all RDMA registration needs.
    if facts.memlock == UNLIMITED or facts.cap_ipc_lock or facts.memlock >= floor:
        return None
    return (f"RLIMIT_MEMLOCK is {facts.memlock} bytes, below the floor of {floor} (healthCheck.memlockFloorBytes), "
            "and the container lacks CAP_IPC_LOCK")


def check_shm(want: int, facts: NodeFacts) -> str | None:
    if facts.shm_bytes is None:
        return f"/dev/shm is missing; shmSize asks for {want} bytes"
    if facts.shm_bytes < want:
        return f"/dev/shm holds {facts.shm_bytes} bytes, shmSize asks for {want}"
    return None


def evaluate(request: HealthRequest, facts: NodeFacts) -> HealthVerdict:
    """Every check the request calls for; the first failure decides, in the order GPUs, RDMA, memlock, shm."""
    checks: list[tuple[str, str | None]] = []
    passed: list[str] = []
    if request.gpus:
        checks.append((HealthReason.GPUS_NOT_VISIBLE, check_gpus(request.gpus, facts)))
        passed.append(f"{request.gpus} GPUs visible")
    if request.rdma:
        checks.append((HealthReason.RDMA_DEVICES_MISSING, check_rdma(request.rdma, request.rdma_env, facts)))
        checks.append((HealthReason.MEMLOCK_TOO_LOW, check_memlock(request.memlock_floor, facts)))
        passed.append(f"{request.rdma} RDMA devices, memlock ok")
    if request.shm_bytes is not None:
        checks.append((HealthReason.SHM_TOO_SMALL, check_shm(request.shm_bytes, facts)))
        passed.append(f"/dev/shm >= {request.shm_bytes} bytes")
    for reason, failure in checks:
        if failure is not None:
            return HealthVerdict(HealthStatus.FAILED, reason, failure)
    return HealthVerdict(HealthStatus.PASSED, HealthReason.HEALTHY, ", ".join(passed))


def _nvidia_smi_gpus() -> int | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def _cap_ipc_lock(status: Path = Path("/proc/self/status")) -> bool:
    try:
        for line in status.read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_IPC_LOCK_BIT & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _count(folder: Path, pattern: str) -> int:
    try:
        return sum(1 for p in folder.iterdir() if re.fullmatch(pattern, p.name))
    except OSError:
        return 0


def gather(request: HealthRequest, dev: Path = Path("/dev")) -> NodeFacts:
    """The facts the request needs, read from this container."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    shm: int | None = None
    if request.shm_bytes is not None:
        try:
            st = os.statvfs(dev / "shm")
            shm = st.f_blocks * st.f_frsize
        except OSError:
            shm = None
    return NodeFacts(
        env=dict(os.environ),
        nvidia_ctl=(dev / "nvidiactl").exists(),
        nvidia_devices=_count(dev, r"nvidia[0-9]+"),
        nvidia_smi_gpus=_nvidia_smi_gpus() if request.gpus else None,
        uverbs_devices=_count(dev / "infiniband", r"uverbs[0-9]+"),
        memlock=UNLIMITED if soft == resource.RLIM_INFINITY else soft,
        cap_ipc_lock=_cap_ipc_lock(),
        shm_bytes=shm,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("node health check (spec.healthCheck)")
    group.add_argument("--check-gpus", type=int, default=0, metavar="N", help="N GPUs must be visible")
    group.add_argument("--check-rdma", type=int, default=0, metavar="N", help="N RDMA devices, and memlock")
    group.add_argument("--rdma-env", help="env var the RDMA device plugin lists its device IDs in")
    group.add_argument("--memlock-floor", type=int, default=0, metavar="BYTES")
    group.add_argument("--check-shm", metavar="QUANTITY", help="/dev/shm must hold this much (shmSize)")


def request_from_args(args: argparse.Namespace) -> HealthRequest:
    return HealthRequest(gpus=args.check_gpus, rdma=args.check_rdma, rdma_env=args.rdma_env,
                         memlock_floor=args.memlock_floor,
                         shm_bytes=quantity_bytes(args.check_shm) if args.check_shm else None)
