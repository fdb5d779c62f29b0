"""The shared cache and the checkpoint volume on a job's pods: volumes, mounts, and the paths in env.

Layout (docs/checkpoints.md):
  <cache.mountPath>/                 the project cache, every node, read-write (BT_PROJECT_CACHE_DIR)
  <cache.mountPath>/<job>/           the job's cache dir: write checkpoints here (BT_CHECKPOINT_DIR)
  <checkpointing.mountPath>/<job>/   complete, verified copies made by the mirror; read-only on nodes
"""

from __future__ import annotations

import posixpath
from typing import Any

from multinode.api import TrainingJob
from multinode.api.checkpointing import CHECKPOINT_REQUEST_FILE
from multinode.api.constants import EnvName
from multinode.render import names

CACHE_VOLUME = "multinode-cache"
CHECKPOINT_VOLUME = "multinode-checkpoints"


def job_cache_dir(job: TrainingJob) -> str | None:
    cache = job.spec.cache
    return posixpath.join(cache.mount_path, names.job_name(job)) if cache else None


def job_mirror_dir(job: TrainingJob, job_name: str | None = None) -> str | None:
    """Where the mirror publishes `job_name`'s checkpoints (default: this job's)."""
    ckpt = job.spec.checkpointing
    return posixpath.join(ckpt.mount_path, job_name or names.job_name(job)) if ckpt else None


def request_file(job: TrainingJob) -> str | None:
    """Where the mirror relays the operator's checkpoint requests (docs/checkpoints.md)."""
    mirror_dir = job_mirror_dir(job)
    return posixpath.join(mirror_dir, CHECKPOINT_REQUEST_FILE) if mirror_dir else None


def storage_volumes(job: TrainingJob) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = []
    if job.spec.cache:
        volumes.append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": job.spec.cache.claim_name}})
    if job.spec.checkpointing:
        volumes.append({"name": CHECKPOINT_VOLUME,
                        "persistentVolumeClaim": {"claimName": job.spec.checkpointing.claim_name}})
    return volumes


def mirror_storage_volumes(job: TrainingJob) -> list[dict[str, Any]]:
    """The node pods' volumes, the cache claim read-only: the mirror never writes it, and the kubelet then
    leaves its ownership alone (the mirror pod's fsGroup is for the checkpoint volume)."""
    volumes = storage_volumes(job)
    for volume in volumes:
        if volume["name"] == CACHE_VOLUME:
            volume["persistentVolumeClaim"]["readOnly"] = True
    return volumes


def node_storage_mounts(job: TrainingJob) -> list[dict[str, Any]]:
    """Nodes write the cache and only read the backed-up copies (the mirror is their one writer)."""
    mounts: list[dict[str, Any]] = []
    if job.spec.cache:
        mounts.append({"name": CACHE_VOLUME, "mountPath": job.spec.cache.mount_path})
    if job.spec.checkpointing:
        mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": job.spec.checkpointing.mount_path, "readOnly": True})
    return mounts


def mirror_storage_mounts(job: TrainingJob) -> list[dict[str, Any]]:
    """The mirror reads the cache and writes the backed-up volume."""
    cache, ckpt = job.spec.cache, job.spec.checkpointing
    # A mirror is rendered only for a job with both (the CRD requires cache when checkpointing is set).
    assert cache is not None and ckpt is not None, "the mirror needs spec.cache and spec.checkpointing"
    return [
        {"name": CACHE_VOLUME, "mountPath": cache.mount_path, "readOnly": True},
        {"name": CHECKPOINT_VOLUME, "mountPath": ckpt.mount_path},
    ]


def storage_env(job: TrainingJob, *, restarts: int, resume_from: str) -> list[tuple[str, object]]:
    """(name, value) pairs: the cache and checkpoint paths under multinode's and Baseten's names."""
    pairs: list[tuple[str, object]] = [(EnvName.MULTINODE_RESTART_COUNT, restarts), (EnvName.BT_RETRY_COUNT, restarts)]
    cache, cache_dir = job.spec.cache, job_cache_dir(job)
    if cache is not None:
        pairs += [
            (EnvName.MULTINODE_CACHE_DIR, cache.mount_path),
            (EnvName.MULTINODE_JOB_CACHE_DIR, cache_dir),
            (EnvName.BT_PROJECT_CACHE_DIR, cache.mount_path),
        ]
    if job.spec.checkpointing is not None:
        pairs += [
            # Where training writes checkpoints: the job's cache dir, which the mirror watches.
            (EnvName.MULTINODE_CHECKPOINT_DIR, cache_dir),
            (EnvName.BT_CHECKPOINT_DIR, cache_dir),
            (EnvName.MULTINODE_MIRROR_DIR, job_mirror_dir(job)),
            # Where the mirror relays the operator's checkpoint requests (multinode.progress reads it).
            (EnvName.MULTINODE_CHECKPOINT_REQUEST_FILE, request_file(job)),
            # Empty on a first start with nothing to resume from: scripts test for emptiness.
            (EnvName.MULTINODE_RESUME_FROM, resume_from),
            (EnvName.BT_LOAD_CHECKPOINT_DIR, resume_from),
        ]
    return pairs
