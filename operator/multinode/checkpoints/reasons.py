"""Why a checkpoint directory in the cache is not complete yet: a small fixed set of CamelCase codes.

Each rule of layouts.py that says "not yet" names one of these beside its human message; the mirror
reports them in `SyncReport.incomplete`, the mirror pod in `status.checkpoints.notReady` and in the
`multinode_mirror_not_ready_checkpoints{reason}` gauge (the codes are its only label values).
docs/checkpoints.md lists them, docs/troubleshooting.md says what to do for each.
"""

from __future__ import annotations

from enum import StrEnum


class NotReady(StrEnum):
    TEMPORARY_NAME = "TemporaryName"            # *.tmp, tmp-checkpoint-*, *.orbax-checkpoint-tmp-*, *-unfinished
    SAVE_IN_PROGRESS = "SaveInProgress"         # a NeMo -unfinished marker, DCP's .metadata.tmp
    WAITING_FOR_MARKER = "WaitingForMarker"     # the mode's marker (COMPLETE, .metadata, trainer_state.json) is absent
    WAITING_FOR_RANK_FILES = "WaitingForRankFiles"   # the metadata names rank files (or ranks) not there yet
    BEING_REWRITTEN = "BeingRewritten"          # a file is newer than the marker: a save rewrites it in place
    RANK_LOCAL_METADATA_WITHOUT_WORLD_SIZE = "RankLocalMetadataWithoutWorldSize"
    NOT_SETTLED = "NotSettled"                  # DeepSpeed/HF: files not unchanged for settleSeconds yet
    WAITING_FOR_TRACKER = "WaitingForTracker"   # Megatron/DeepSpeed tracker absent or naming an older checkpoint
    TRACKER_UNREADABLE = "TrackerUnreadable"    # latest_checkpointed_iteration.txt holds no iteration
    LAYOUT_MISMATCH = "LayoutMismatch"          # an explicit completion mode, and the name is not of its layout
    NO_COMPLETION_EVIDENCE = "NoCompletionEvidence"   # auto: no rule recognises the directory
    EMPTY = "Empty"                             # no file in it (a save not started, a deletion in progress)
    CANNOT_INSPECT = "CannotInspect"            # reading the directory failed (permissions, I/O error)
    REFUSED = "Refused"                         # it holds what the mirror never reads (a Refusal, below)


class Refusal(StrEnum):
    """Why a checkpoint is refused: the cache is written by the trainer, and the mirror trusts nothing in it.

    A refused checkpoint is listed as NotReady.REFUSED and reported as a problem with one of these reasons
    on every pass; it is never published, and never replaces one already published (docs/checkpoints.md).
    """

    UNSAFE_SYMLINK = "UnsafeSymlink"        # a symlink that leaves the checkpoint, or names a directory
    SPECIAL_FILE = "SpecialFile"            # a FIFO, socket or device: never opened for reading
    METADATA_TOO_LARGE = "MetadataTooLarge"   # a file the rules parse (DCP .metadata) beyond its bound


class RefusedEntry(Exception):
    """Raised by whatever walks or opens a checkpoint's files when one of them breaks a rule of Refusal."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def ranks_text(ranks: list[int], limit: int = 8) -> str:
    """`3, 5-7, 9` for the ranks given (sorted), at most `limit` ranges and then how many more."""
    ranges: list[tuple[int, int]] = []
    for rank in sorted(ranks):
        if ranges and rank == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], rank)
        else:
            ranges.append((rank, rank))
    words = [str(a) if a == b else f"{a}-{b}" for a, b in ranges[:limit]]
    if len(ranges) > limit:
        words.append(f"and {sum(b - a + 1 for a, b in ranges[limit:])} more")
    return ", ".join(words)
