"""What spec.healthCheck adds to a node pod: the preflight's health arguments and devices. (The node affinity
that keeps a new attempt off the nodes in status.excludedNodes: node_exclusion.py.)"""

from __future__ import annotations

from multinode.api import TrainingJob
from multinode.api.health_check import COLLECTIVE_MEMORY_FACTOR, CollectiveBandwidthSpec


def health_args(job: TrainingJob) -> list[str]:
    """`multinode preflight` arguments for the checks that follow from the request ([] for none)."""
    check = job.spec.health_check
    if not check.enabled:
        return []
    args: list[str] = []
    gpus = job.spec.resources_per_node.gpus
    if check.gpus and gpus > 0:
        args += ["--check-gpus", str(gpus)]
    rdma = job.spec.network.rdma
    if check.rdma and rdma is not None:
        args += ["--check-rdma", str(rdma.count), "--memlock-floor", str(check.memlock_floor_bytes)]
        if check.rdma_device_env:
            args += ["--rdma-env", check.rdma_device_env]
    if check.shm and job.spec.shm_size is not None:
        args += ["--check-shm", job.spec.shm_size]
    return args


def _collective(job: TrainingJob) -> CollectiveBandwidthSpec | None:
    """The collective bandwidth test the job asks for; None when it is off."""
    check = job.spec.health_check
    return check.collective_bandwidth if check.enabled else None


def collective_args(job: TrainingJob, index: int) -> list[str]:
    """`multinode preflight` arguments of the collective bandwidth test ([] when it is off). The port and the
    ring's id are the attempt's MASTER_PORT and MULTINODE_RDZV_ID, which the preflight reads from its env."""
    bandwidth = _collective(job)
    if bandwidth is None:
        return []
    return ["--collective-min-gbps", f"{bandwidth.min_gbps:g}", "--collective-size-mib", str(bandwidth.size_mib),
            "--collective-timeout", str(bandwidth.timeout_seconds), "--node-index", str(index)]


# The test's Python moves the buffer with two threads and reduces it on the CPU: under the preflight's usual
# 0.1 CPU it would measure its CFS quota, not the links. Its memory: api.health_check.COLLECTIVE_MEMORY_FACTOR.
COLLECTIVE_CPU_LIMIT = "2"


def collective_limits(job: TrainingJob, memory_mib: int) -> dict[str, str]:
    """The preflight's CPU and memory limits while it runs the collective test ({} when it is off), given
    its usual memory limit in MiB."""
    bandwidth = _collective(job)
    if bandwidth is None:
        return {}
    return {"cpu": COLLECTIVE_CPU_LIMIT, "memory": f"{memory_mib + COLLECTIVE_MEMORY_FACTOR * bandwidth.size_mib}Mi"}


def checked_device_limits(job: TrainingJob) -> dict[str, str]:
    """The trainer's device limits the preflight also asks for, so the check sees the trainer's devices.

    The kubelet's device manager allocates an init container's devices first and hands them on to the app
    containers (they are "reusable"), and the pod's effective request is the larger of the two, so this
    costs no extra GPU: the check runs on the very devices the trainer gets.
    """
    check = job.spec.health_check
    limits: dict[str, str] = {}
    if not check.enabled:
        return limits
    resources = job.spec.resources_per_node
    if check.gpus and resources.gpus > 0:
        limits[resources.gpu_resource_name] = str(resources.gpus)
    rdma = job.spec.network.rdma
    if check.rdma and rdma is not None:
        limits[rdma.resource_name] = str(rdma.count)
    return limits


def checks_rdma(job: TrainingJob) -> bool:
    check = job.spec.health_check
    return check.enabled and check.rdma and job.spec.network.rdma is not None


def checks_shm(job: TrainingJob) -> bool:
    check = job.spec.health_check
    return check.enabled and check.shm and job.spec.shm_size is not None
