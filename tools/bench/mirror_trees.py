"""The checkpoint trees tools/bench/mirror.py mirrors: files shaped like what real frameworks write.

A tree is one job's cache directory holding one checkpoint per layout, each marked COMPLETE: a Hugging
Face Trainer checkpoint (safetensors shards, tokenizer and config files, per-rank rng states), a
DeepSpeed ZeRO one (model states, one optimizer shard per rank), a torch DCP one (one .distcp per rank and
the .metadata naming them) and a "many small files" one (per-parameter files, as some sharded savers
write). `scale` multiplies the big files only, so the small tree is dominated by per-file costs and the
large one by bytes. The content is random: the benchmark is about speed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

KB, MB = 1 << 10, 1 << 20
WRITE_CHUNK = 64 << 20
RANKS = 16


def _hf(scale: int) -> dict[str, int]:
    files = {"config.json": 2 * KB, "generation_config.json": 200, "tokenizer.json": 2 * MB + 311 * KB,
             "tokenizer_config.json": 50 * KB, "special_tokens_map.json": 500, "vocab.json": 780 * KB,
             "merges.txt": 450 * KB, "model.safetensors.index.json": 30 * KB, "trainer_state.json": 12 * KB,
             "training_args.bin": 5 * KB, "scheduler.pt": 1 * KB + 300, "optimizer.pt": 96 * MB * scale}
    files |= {f"model-{i:05d}-of-00004.safetensors": 24 * MB * scale + i * KB for i in range(1, 5)}
    files |= {f"rng_state_{r}.pth": 14 * KB + 500 for r in range(RANKS)}
    return {f"checkpoint-1000/{name}": size for name, size in files.items()}


def _deepspeed(scale: int) -> dict[str, int]:
    files = {"mp_rank_00_model_states.pt": 48 * MB * scale, "zero_to_fp32.py": 25 * KB}
    files |= {f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt": 6 * MB * scale + r * KB for r in range(RANKS)}
    return {f"global_step1000/{name}": size for name, size in files.items()}


def _dcp(scale: int) -> dict[str, int]:
    files = {f"__{r}_0.distcp": 5 * MB * scale + r * KB for r in range(RANKS)}
    return {f"step-1000/{name}": size for name, size in files.items()}


def _many_small(scale: int, count: int) -> dict[str, int]:
    # `count` files of 4-68 KB (a per-parameter save of a small model), 50 per directory, plus a few
    # embedding-sized ones that grow with `scale`.
    files = {f"layers.{i // 50}/param_{i % 50}.bin": 4 * KB + (i * 7919) % (64 * KB) for i in range(count)}
    files |= {f"embeddings/part_{i}.bin": 8 * MB * scale for i in range(4)}
    return {f"ckpt_1000/{name}": size for name, size in files.items()}


LAYOUTS = {"hf": _hf, "deepspeed": _deepspeed, "dcp": _dcp}
# Files whose content matters to the completion rules: DeepSpeed's tracker names its newest tag.
TEXT = {"latest": b"global_step1000"}


def tree_files(scale: int, small_files: int) -> dict[str, int]:
    """Relative path -> size of every file of the tree at `scale` (COMPLETE markers included)."""
    files: dict[str, int] = {}
    for part in [layout(scale) for layout in LAYOUTS.values()] + [_many_small(scale, small_files)]:
        files |= part
        files |= {f"{rel.split('/', 1)[0]}/COMPLETE": 0 for rel in part}
    return files | {rel: len(text) for rel, text in TEXT.items()}


def make_tree(job: Path, scale: int, small_files: int) -> tuple[int, int]:
    """Write the tree under `job` unless a previous run left the same one; returns (bytes, files)."""
    files = tree_files(scale, small_files)
    total = sum(files.values())
    stamp = job.parent / f"{job.name}.tree"
    wanted = f"{sorted(files.items())}"
    if stamp.exists() and stamp.read_text() == wanted:
        return total, len(files)
    subprocess.run(["rm", "-rf", str(job)], check=True)
    for rel, size in files.items():
        path = job / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel in TEXT:
            path.write_bytes(TEXT[rel])
            continue
        with open(path, "wb") as f:
            left = size
            while left:
                n = min(left, WRITE_CHUNK)
                f.write(os.urandom(n))
                left -= n
    stamp.write_text(wanted)
    subprocess.run(["sync"], check=True)
    return total, len(files)
