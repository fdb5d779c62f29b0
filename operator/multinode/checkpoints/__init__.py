"""Checkpoint mirroring: copy only complete checkpoints from a job's cache into a backed-up volume.

Atomically (staging + rename), verified (XXH3-128 of the bytes written, manifest last), deduplicated
(reflink or hard link of content already published) and with retention. A standalone library: stdlib
and xxhash only, no Kubernetes; the `multinode mirror` pod calls it in a loop and reports the results.
docs/checkpoints.md describes the layouts, the publish protocol and the problems it reports.
"""

from multinode.checkpoints.layouts import Completion
from multinode.checkpoints.manifest import (
    MANIFEST_NAME,
    CorruptCheckpoint,
    MirroredCheckpoint,
    list_mirrored,
    verify_mirrored,
)
from multinode.checkpoints.mirror_pass import Mirror, MirrorProblem, SyncReport
from multinode.checkpoints.reasons import NotReady
from multinode.checkpoints.scan import CheckpointCandidate, latest_complete_checkpoint, scan_checkpoints
from multinode.checkpoints.settle import SettleTracker
from multinode.checkpoints.waiting import IncompleteCheckpoint

__all__ = [
    "MANIFEST_NAME",
    "CheckpointCandidate",
    "Completion",
    "CorruptCheckpoint",
    "IncompleteCheckpoint",
    "Mirror",
    "MirrorProblem",
    "MirroredCheckpoint",
    "NotReady",
    "SettleTracker",
    "SyncReport",
    "latest_complete_checkpoint",
    "list_mirrored",
    "scan_checkpoints",
    "verify_mirrored",
]
