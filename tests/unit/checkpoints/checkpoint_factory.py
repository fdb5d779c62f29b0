"""Builders for checkpoint directories in the layouts the engine recognises (real files in temp dirs)."""

from __future__ import annotations

import os
import random
from pathlib import Path

HOUR_AGO = 3600.0
T0 = 1_800_000_000.0


class Clock:
    """An injectable wall clock: tests move time forward instead of sleeping."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def write(path: Path, data: bytes = b"x", *, age: float | None = None) -> Path:
    """Write a file (creating parents); `age` backdates its mtime by that many seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if age is not None:
        t = path.stat().st_mtime - age
        os.utime(path, (t, t))
    return path


def random_bytes(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def sharded(root: Path, name: str, *, shards: int = 8, shard_size: int = 64 << 10, seed: int = 0,
            marker: bool = True) -> Path:
    """The seeds' convention: rank shards, a manifest.json of their own, and COMPLETE written last."""
    ckpt = root / name
    for rank in range(shards):
        write(ckpt / f"rank_{rank:05d}.pt", random_bytes(shard_size, seed * 1000 + rank), age=HOUR_AGO)
    write(ckpt / "manifest.json", b'{"shards": %d}' % shards, age=HOUR_AGO)
    if marker:
        write(ckpt / "COMPLETE", b"", age=HOUR_AGO)
    return ckpt


def _pickled_names(names: list[str]) -> bytes:
    """What pickle puts around each storage path: opcode, one length byte, the name (never unpickled)."""
    return b"\x80\x04\x95" + b"".join(b"\x8c" + bytes([len(n)]) + n.encode() + b"\x94" for n in names) + b"."


def rank_local_dcp(root: Path, name: str, ranks: list[int]) -> Path:
    """DCP saved with use_collectives=False: each rank's shard, then its own __<rank>.metadata naming it."""
    ckpt = root / name
    for rank in ranks:
        write(ckpt / f"__{rank}_0.distcp", random_bytes(2048, rank))
        write(ckpt / f"__{rank}.metadata", _pickled_names([f"__{rank}_0.distcp"]))
    return ckpt


def dcp(root: Path, name: str, *, shards: int = 2, metadata: str = "final", missing: int = 0) -> Path:
    """PyTorch DCP: __<rank>_0.distcp shards and a pickled .metadata naming them.

    metadata="final" writes .metadata, "tmp" only .metadata.tmp (the coordinator has not renamed it),
    "none" neither. `missing` leaves out that many of the shards .metadata names.
    """
    ckpt = root / name
    names = [f"__{rank}_0.distcp" for rank in range(shards)]
    for rank, shard in enumerate(names[: shards - missing]):
        write(ckpt / shard, random_bytes(4096, rank))
    body = _pickled_names(names)
    if metadata == "final":
        write(ckpt / ".metadata", body)
    elif metadata == "tmp":
        write(ckpt / ".metadata.tmp", body)
    return ckpt


def megatron(root: Path, iterations: list[int], tracker: str | None) -> None:
    for it in iterations:
        ckpt = root / f"iter_{it:07d}"
        for tp in range(2):
            write(ckpt / f"mp_rank_{tp:02d}" / "model_optim_rng.pt", random_bytes(2048, it + tp))
    if tracker is not None:
        write(root / "latest_checkpointed_iteration.txt", tracker.encode())


def deepspeed(root: Path, steps: list[int], latest: int | None) -> None:
    for step in steps:
        ckpt = root / f"global_step{step}"
        for rank in range(2):
            write(ckpt / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", random_bytes(2048, step + rank))
        write(ckpt / "mp_rank_00_model_states.pt", random_bytes(1024, step))
    if latest is not None:
        write(root / "latest", f"global_step{latest}".encode())


def hf(root: Path, step: int, *, trainer_state: bool = True, age: float | None = None) -> Path:
    ckpt = root / f"checkpoint-{step}"
    write(ckpt / "model.safetensors", random_bytes(4096, step), age=age)
    write(ckpt / "optimizer.pt", random_bytes(2048, step + 1), age=age)
    if trainer_state:
        write(ckpt / "trainer_state.json", b'{"global_step": %d}' % step, age=age)
    if age is not None:
        t = ckpt.stat().st_mtime - age
        os.utime(ckpt, (t, t))
    return ckpt


def nemo(root: Path, step: int, *, unfinished: str | None = None) -> Path:
    """A NeMo checkpoint; unfinished="sibling" or "inner" leaves the -unfinished marker of a save in progress."""
    name = f"megatron_gpt--val_loss=1.50-step={step}-consumed_samples={step * 8}.0"
    ckpt = root / name
    write(ckpt / "weights" / "__0_0.distcp", random_bytes(2048, step))
    write(ckpt / "weights" / "metadata.json", b"{}")
    if unfinished == "sibling":
        write(root / f"{name}-unfinished", b"")
    elif unfinished == "inner":
        write(ckpt / f"{name}-unfinished", b"")
    return ckpt


def orbax(root: Path, step: int, *, committed: bool = True) -> Path:
    name = str(step) if committed else f"{step}.orbax-checkpoint-tmp-1795216897"
    ckpt = root / name
    write(ckpt / "_CHECKPOINT_METADATA", b"{}")
    write(ckpt / "default" / "_METADATA", b"{}")
    write(ckpt / "default" / "manifest.ocdbt", random_bytes(1024, step))
    return ckpt


def published_names(dest: Path) -> set[str]:
    return {p.name for p in dest.iterdir() if p.is_dir() and not p.name.startswith(".")} if dest.exists() else set()


def hidden_dirs(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.iterdir() if p.is_dir() and p.name.startswith("."))
