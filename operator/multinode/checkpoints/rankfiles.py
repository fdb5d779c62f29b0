"""Per-rank files: the layouts whose marker one rank writes with no barrier after the other ranks' files.

HF Trainer's rank 0 writes `trainer_state.json` while other ranks may still be writing, and DeepSpeed's
rank 0 writes `latest` before the barrier that ends the save. The settle rule guesses; a rank slower than
`settle_seconds` beats it. The job's world size (numNodes x numProcPerNode) tells instead: the checkpoint
waits until every rank wrote its own last file, whole. Each function here returns why a checkpoint still
waits, or None when every rank's file is there (or when the layout's files say nothing about ranks).
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

from multinode.checkpoints.tree import open_regular

HF_RNG_SINGLE = "rng_state.pth"   # HF Trainer with one process
_HF_RNG = re.compile(r"^rng_state(?:_(\d+))?\.pth$")
# ZeRO: every rank writes <prefix>zero_pp_rank_<dp rank>_mp_rank_<mp rank>_optim_states.pt (stage 3 also
# ..._model_states.pt); mp_rank counts every model-parallel axis (tensor and pipeline: DeepSpeed's
# PipelineParallelGrid numbers the ranks of one data-parallel replica), so world size = dp x mp.
_ZERO_FILE = re.compile(r"^(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_(optim|model)_states\.pt$")
_MP_MODEL_FILE = re.compile(r"^mp_rank_(\d+)_model_states\.pt$")
WAITING = "waiting for rank files"   # how every reason here starts
_NAMED = 3


def hf_rank_files(path: Path, world_size: int) -> str | None:
    """Every rank of an HF Trainer save writes `rng_state_<rank>.pth` (`rng_state.pth` with one process)
    as its last file, after its model, optimizer and scheduler files."""
    names = set(os.listdir(path))
    if not any(_HF_RNG.match(n) for n in names):
        # save_only_model=True: no rank saves its RNG state, so the files say nothing about the ranks.
        # (Without it rank 0 writes its own before trainer_state.json, so one is always there.)
        return None
    expected = [HF_RNG_SINGLE] if world_size == 1 else [f"rng_state_{r}.pth" for r in range(world_size)]
    return _waiting(path, names, expected, f"{world_size} rank(s)")


def deepspeed_rank_files(path: Path, world_size: int) -> str | None:
    """Every rank of a ZeRO save writes its own partition of the optimizer state. The model-parallel
    ranks are read from the names (the highest mp_rank seen, + 1); the data-parallel ones are what the
    world size leaves. A model-parallel rank that has written nothing yet makes the count too low and
    the checkpoint wait for more files, never too few. Without ZeRO files (ZeRO off) there is nothing
    per data-parallel rank: the settle rule decides alone."""
    names = set(os.listdir(path))
    zero = [m for n in names if (m := _ZERO_FILE.match(n))]
    if not zero:
        return None
    mp_seen = [int(m.group(3)) for m in zero] + [int(m.group(1)) for n in names if (m := _MP_MODEL_FILE.match(n))]
    model_parallel = max(mp_seen) + 1
    if world_size % model_parallel:
        return (f"{WAITING}: model-parallel ranks 0..{model_parallel - 1} seen, which do not divide the job's "
                f"{world_size} ranks")
    data_parallel = world_size // model_parallel
    kinds = sorted({(m.group(1) or "", m.group(4)) for m in zero})
    expected = [f"{prefix}zero_pp_rank_{dp}_mp_rank_{mp:02d}_{kind}_states.pt"
                for prefix, kind in kinds for mp in range(model_parallel) for dp in range(data_parallel)]
    return _waiting(path, names, expected, f"{data_parallel} data-parallel x {model_parallel} model-parallel ranks")


def _waiting(path: Path, names: set[str], expected: list[str], ranks: str) -> str | None:
    missing = [n for n in expected if n not in names]
    if missing:
        shown = ", ".join(missing[:_NAMED]) + (", ..." if len(missing) > _NAMED else "")
        return f"{WAITING}: {len(missing)} of {len(expected)} missing ({shown}; {ranks})"
    partial = next((n for n in expected if not torch_file_whole(path / n)), None)
    if partial:
        return f"{WAITING}: {partial} is still being written (no end-of-archive record yet)"
    return None


def torch_file_whole(path: Path) -> bool:
    """torch.save writes a zip archive and its end-of-central-directory record last: a zip without that
    record is still being written (or its writer died). A file in torch's legacy (non-zip) format cannot
    tell; it counts as whole once it is longer than a zip's magic number. (zipfile reads only the end of the
    file: the record, and the central directory it points to.)"""
    fd, _ = open_regular(path)
    with open(fd, "rb") as f:
        head = f.read(4)
        if head != b"PK\x03\x04":
            return len(head) == 4
        return zipfile.is_zipfile(f)
