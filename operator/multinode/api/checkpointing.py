"""The shared cache and checkpoint mirroring: spec fields and the status the mirror reports.

Names follow Baseten Training, which the seeds describe: a project cache every node sees (not backed up)
and a checkpoint directory that is. `status.checkpoints` is written only by the job's mirror pod; the
operator never writes it, so the two writers never overwrite each other.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from multinode.api.base import DNS1123_SUBDOMAIN_PATTERN, MAX_NAME_LENGTH, MAX_PATH_LENGTH, ApiModel, StatusModel
from multinode.api.cel import cel_rule
from multinode.checkpoints.layouts import Completion

ABSOLUTE_PATH_PATTERN = r"^/[^:]*$"
# PersistentVolumeClaim names are DNS-1123 subdomains.
CLAIM_NAME_PATTERN = DNS1123_SUBDOMAIN_PATTERN
DEFAULT_CACHE_MOUNT_PATH = "/cache"
DEFAULT_CHECKPOINT_MOUNT_PATH = "/checkpoints"
# status.checkpoints.notReady lists at most this many (the newest): the status object stays small.
MAX_NOT_READY_REPORTED = 5
MAX_NOT_READY_MESSAGE = 1024
# status.resumedBy lists at most this many checkpoints; the mirror prunes nothing while it is full (there may
# be more than it says).
MAX_RESUMED_BY = 32
# An hour: a drain that waits longer than that for one checkpoint is a drain that hangs.
MAX_BEFORE_DISRUPTION_SECONDS = 3600
# Where the mirror relays a checkpoint request, under the job's mirrored checkpoints (a hidden name: never
# taken for a checkpoint); the trainer reads it read-only (MULTINODE_CHECKPOINT_REQUEST_FILE).
CHECKPOINT_REQUEST_FILE = ".multinode-checkpoint-request"
JOB_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_DATE_TIME: JsonDict = {"format": "date-time"}


# The engine's own list of completion rules is the API's: a rule the engine does not know cannot be
# admitted. (The engine imports nothing of multinode, so this dependency points one way only.)
CompletionRule = Completion


class CacheSpec(ApiModel):
    """The shared cache: a PersistentVolumeClaim (ReadWriteMany) mounted on every node. Not backed up."""

    claim_name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=CLAIM_NAME_PATTERN,
                            description="Name of the PVC in the job's namespace.")
    mount_path: str = Field(DEFAULT_CACHE_MOUNT_PATH, max_length=MAX_PATH_LENGTH, pattern=ABSOLUTE_PATH_PATTERN,
                            description="Where every node sees the cache (BT_PROJECT_CACHE_DIR). The job's own "
                                        "directory is <mountPath>/<job name>, created before the trainer starts.")


class ResumeFrom(ApiModel):
    """Where a first attempt resumes from. Later attempts resume from this job's own latest checkpoint."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [cel_rule(
        "has(self.trainingJob) != has(self.path)",
        "spec.checkpointing.resumeFrom: set exactly one of trainingJob and path")]})

    training_job: str | None = Field(
        None, min_length=1, max_length=63, pattern=JOB_NAME_PATTERN,
        description="Another TrainingJob in this namespace: resume from its latest mirrored checkpoint. "
                    "Both jobs must use the same checkpoint volume.")
    path: str | None = Field(None, max_length=MAX_PATH_LENGTH, pattern=ABSOLUTE_PATH_PATTERN,
                             description="An absolute path, as the trainer sees it, to resume from.")


class CheckpointingSpec(ApiModel):
    """Mirror complete checkpoints from the job's cache directory into a backed-up volume."""

    claim_name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=CLAIM_NAME_PATTERN,
                            description="PVC of the backed-up checkpoint volume, in the job's namespace.")
    mount_path: str = Field(DEFAULT_CHECKPOINT_MOUNT_PATH, max_length=MAX_PATH_LENGTH, pattern=ABSOLUTE_PATH_PATTERN,
                            description="Where the checkpoint volume is mounted: read-write in the mirror pod, "
                                        "read-only on the nodes. Mirrored checkpoints live in <mountPath>/<job name>/.")
    completion: CompletionRule = Field(CompletionRule.AUTO,
                                       description="What makes a checkpoint complete: auto recognises a COMPLETE "
                                                   "marker, PyTorch DCP, Megatron, DeepSpeed, HF Trainer, NeMo and "
                                                   "Orbax layouts, and never takes temporary or unfinished ones.")
    keep: int = Field(3, ge=1, le=1000, description="How many mirrored checkpoints to keep (the newest and the one "
                                                     "a running attempt resumed from are never pruned).")
    interval_seconds: int = Field(30, ge=1, le=86400, description="How often the mirror looks for new checkpoints.")
    settle_seconds: int = Field(60, ge=0, le=86400,
                                description="For layouts whose marker is written before every rank finished "
                                            "(DeepSpeed latest, HF trainer_state.json): how long the newest "
                                            "checkpoint must stay unchanged before it counts as complete.")
    final_sync_timeout_seconds: int = Field(1800, ge=10, le=604800,
                                            description="How long the job waits, after training ended, for the "
                                                        "mirror's final sync before finishing without it.")
    resume_from: ResumeFrom | None = Field(None, description="Resume the first attempt from another job's "
                                                             "checkpoints or a path.")
    before_disruption_seconds: int = Field(
        0, ge=0, le=MAX_BEFORE_DISRUPTION_SECONDS,
        description="When a node of the job is cordoned (kubectl drain, node repair): ask the trainer for a "
                    "checkpoint and wait up to this long for it to be mirrored before the gang moves off the "
                    "node; a PodDisruptionBudget holds evictions meanwhile. 0: no wait (evictions go through). "
                    "Also the wait of `multinode checkpoint` (docs/checkpoints.md).")


class MirroredCheckpointStatus(StatusModel):
    """One checkpoint as the mirror published it."""

    name: str = Field(max_length=MAX_NAME_LENGTH, description="Directory name of the checkpoint.")
    path: str = Field(max_length=MAX_PATH_LENGTH, description="Where nodes find it (under the checkpoint mountPath).")
    step: int | None = Field(None, description="Training step, when the name says it.")
    bytes: int = Field(0, ge=0, description="Total size.")
    mirrored_at: str = Field(description="RFC3339 time it was published.", json_schema_extra=_DATE_TIME)


class MirrorProblemStatus(StatusModel):
    reason: str = Field(max_length=128, description="CamelCase reason, e.g. DestinationFull, SourceChanged.")
    message: str = Field("", max_length=4096, description="What went wrong and where.")
    time: str = Field(description="RFC3339 time it was seen.", json_schema_extra=_DATE_TIME)


class NotReadyCheckpointStatus(StatusModel):
    """A checkpoint directory in the cache that the mirror does not publish yet, and why."""

    name: str = Field(max_length=MAX_NAME_LENGTH, description="Directory name of the checkpoint in the cache.")
    step: int | None = Field(None, description="Training step, when the name says it.")
    reason: str = Field(max_length=64, pattern=r"^[A-Z][A-Za-z]*$",
                        description="Why it is not complete yet, one of the codes docs/checkpoints.md lists: "
                                    "WaitingForMarker, WaitingForRankFiles, BeingRewritten, NotSettled, ...")
    message: str = Field("", max_length=MAX_NOT_READY_MESSAGE,
                         description="The directory and the detail: which file is newer than the marker, which "
                                     "ranks are missing.")
    since: str = Field(description="RFC3339 time the mirror first saw it incomplete.", json_schema_extra=_DATE_TIME)


class CheckpointsStatus(StatusModel):
    """Written only by the job's mirror pod (its Role allows nothing else)."""

    latest: MirroredCheckpointStatus | None = Field(None, description="Newest complete mirrored checkpoint.")
    mirrored: int = Field(0, ge=0, description="Checkpoints published by this mirror so far.")
    last_sync_time: str | None = Field(None, description="RFC3339 time of the last pass that published something.",
                                       json_schema_extra=_DATE_TIME)
    problem: MirrorProblemStatus | None = Field(None, description="The last problem of the last pass; "
                                                                  "absent when it went well.")
    final_sync_time: str | None = Field(None, description="RFC3339 time the final sync after training finished.",
                                        json_schema_extra=_DATE_TIME)
    not_ready: list[NotReadyCheckpointStatus] = Field(
        default_factory=list, max_length=MAX_NOT_READY_REPORTED,
        description=f"The newest checkpoint directories of the cache (at most {MAX_NOT_READY_REPORTED}, newest "
                    "first) that are not complete, so not published yet, with the reason; absent when none is.")


class CheckpointRequestState(StrEnum):
    REQUESTED = "Requested"
    MIRRORED = "Mirrored"
    TIMED_OUT = "TimedOut"


class CheckpointRequestStatus(StatusModel):
    """The last checkpoint the operator asked the trainer for: before a planned disruption, or on request."""

    id: str = Field(max_length=MAX_NAME_LENGTH, description="What the mirror writes into the request file; a "
                                                            "trainer checkpoints once per new id.")
    reason: str = Field(max_length=64, description="NodeCordoned or UserRequested.")
    message: str = Field("", max_length=1024, description="Which node, or who asked.")
    attempt: int = Field(ge=0, description="The attempt asked.")
    step: int | None = Field(None, ge=0, description="The newest step the ranks had reported when asked: the "
                                                     "checkpoint that answers is of this step or later.")
    requested_time: str = Field(description="RFC3339 time of the request.", json_schema_extra=_DATE_TIME)
    state: CheckpointRequestState = Field(description="Requested, Mirrored or TimedOut.")
    checkpoint: str | None = Field(None, max_length=MAX_NAME_LENGTH,
                                   description="The mirrored checkpoint that answered it.")
    done_time: str | None = Field(None, description="RFC3339 time it was mirrored or timed out.",
                                  json_schema_extra=_DATE_TIME)


class ResumedByStatus(StatusModel):
    """A checkpoint of this job that another job's running attempt resumed from."""

    path: str = Field(max_length=MAX_PATH_LENGTH, description="The mirrored checkpoint, as status.resumedFrom "
                                                              "of the other job names it.")
    training_job: str = Field(max_length=63, pattern=JOB_NAME_PATTERN,
                              description="The first (by name) of the jobs of this namespace that resumed from it.")
