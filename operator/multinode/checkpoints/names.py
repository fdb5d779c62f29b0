"""What a checkpoint directory's name says: its training step, and whether it is never to be taken.

Frameworks write under temporary names and rename when done (Orbax, DCP's `.metadata.tmp`, torch's
`tmp-checkpoint-*`), or drop an `-unfinished` marker beside the directory while they save (NeMo). A
name that says "temporary" is never mirrored, whatever else the directory contains.
"""

from __future__ import annotations

import re

# Ordered: the first pattern that matches gives the step. NeMo names hold several numbers
# (`megatron_gpt--val_loss=1.23-step=1000-consumed_samples=64000.0`), so `step` wins over the rest.
_STEP_PATTERNS = (
    re.compile(r"global_step(\d+)"),               # DeepSpeed
    re.compile(r"(?:^|[^a-z])iter_(\d+)"),        # Megatron-LM iter_0000100
    re.compile(r"(?:^|[^a-z])step[-_=]?(\d+)"),    # torchtitan step-300, NeMo step=1000
    re.compile(r"checkpoint[-_](\d+)"),            # HF checkpoint-500, the seeds' checkpoint_0001000
    re.compile(r"^(\d+)(?:$|\.orbax-checkpoint-tmp-)"),  # Orbax 300 and 300.orbax-checkpoint-tmp-<ts>
)

UNFINISHED_SUFFIX = "-unfinished"
METADATA_TMP = ".metadata.tmp"


def parse_step(name: str) -> int | None:
    """The training step a checkpoint's name says, or None."""
    for pattern in _STEP_PATTERNS:
        match = pattern.search(name)
        if match:
            return int(match.group(1))
    return None


def never_taken(name: str) -> str | None:
    """Why a directory with this name is never a complete checkpoint, or None when the name is fine."""
    if name.startswith("."):
        return "hidden name"
    if name.endswith(".tmp"):
        return "temporary name (*.tmp)"
    if name.startswith("tmp-checkpoint-"):
        return "temporary name (tmp-checkpoint-*)"
    if ".orbax-checkpoint-tmp-" in name:
        return "Orbax temporary name (*.orbax-checkpoint-tmp-*): not committed yet"
    if name.endswith(UNFINISHED_SUFFIX):
        return "NeMo -unfinished marker"
    return None


def is_temporary_file(name: str) -> bool:
    """Files inside a checkpoint that are never copied: a save still writing them, or an abandoned one."""
    return name.endswith(".tmp")


def order_key(step: int | None, mtime: float | int) -> tuple[int, float | int]:
    """Oldest first: by step, then by time. A checkpoint whose name has no step sorts before any that has."""
    return (-1 if step is None else step, mtime)
