"""Benchmark: the checkpoint mirror against `cp -r` + `sync`, and the bytes a re-mirror copies.

    .venv/bin/python tools/bench/mirror.py [--size-mb 2048] [--rounds 3]

Writes an 8-shard checkpoint of random bytes under the repo's .cache/bench/ (same disk as the
destinations), then alternates `cp -r` followed by `sync` and `Mirror.sync_once()` into fresh
destinations, `--rounds` times each, starting every timed run with a clean `sync`. Reports the median
throughput of each and their ratio (goal: mirror/cp >= 0.9), then re-mirrors the unchanged checkpoint
under a new name, renamed (same mtimes) and copied (new mtimes), and reports the bytes copied as a share
of the total (goal: < 1%). Prints a table and writes .cache/bench/mirror.json. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from multinode.checkpoints import Mirror, verify_mirrored

REPO = Path(__file__).resolve().parents[2]
NAME = "checkpoint_0001000"
MB = 1_000_000
WRITE_CHUNK = 64 << 20


def make_source(job: Path, size_mb: int, shards: int) -> int:
    """An 8-shard checkpoint of random bytes (reused when a previous run left one of the same size)."""
    ckpt = job / NAME
    shard_size = size_mb * (1 << 20) // shards
    expected = [ckpt / f"rank_{r:05d}.pt" for r in range(shards)]
    if all(p.exists() and p.stat().st_size == shard_size for p in expected) and (ckpt / "COMPLETE").exists():
        return shard_size * shards
    shutil.rmtree(job, ignore_errors=True)
    ckpt.mkdir(parents=True)
    for path in expected:
        with open(path, "wb") as f:
            left = shard_size
            while left:
                n = min(left, WRITE_CHUNK)
                f.write(os.urandom(n))
                left -= n
    (ckpt / "COMPLETE").touch()
    subprocess.run(["sync"], check=True)
    return shard_size * shards


def timed_cp(source: Path, dest: Path) -> float:
    subprocess.run(["sync"], check=True)
    started = time.monotonic()
    subprocess.run(["cp", "-r", str(source), str(dest)], check=True)
    subprocess.run(["sync"], check=True)
    return time.monotonic() - started


def timed_mirror(job: Path, dest: Path, total: int, workers: int) -> float:
    subprocess.run(["sync"], check=True)
    started = time.monotonic()
    report = Mirror(job, dest, workers=workers, settle_seconds=0).sync_once()
    seconds = time.monotonic() - started
    if report.problems or report.bytes_copied < total:
        sys.exit(f"mirror pass failed: {report.problems}, copied {report.bytes_copied} of {total}")
    return seconds


def remirror(job: Path, dest: Path, new_name: str, how: str, workers: int) -> dict:
    """Present the published checkpoint again under `new_name` and mirror it: how many bytes are copied?"""
    if how == "renamed":
        os.rename(job / NAME, job / new_name)
    else:
        shutil.copytree(job / NAME, job / new_name, copy_function=shutil.copyfile)
    started = time.monotonic()
    report = Mirror(job, dest, keep=10, workers=workers, settle_seconds=0).sync_once()
    seconds = time.monotonic() - started
    [published] = report.mirrored
    verify_mirrored(published.path, full=False)
    if how == "renamed":
        os.rename(job / new_name, job / NAME)
    else:
        shutil.rmtree(job / new_name)
    return {"how": how, "copied_bytes": report.bytes_copied, "linked_bytes": report.bytes_linked,
            "total_bytes": published.total_bytes, "copied_pct": 100 * report.bytes_copied / published.total_bytes,
            "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=2048, help="checkpoint size in MiB (default 2048)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=REPO / ".cache" / "bench")
    args = parser.parse_args()

    root = args.dir
    root.mkdir(parents=True, exist_ok=True)
    need = 3 * args.size_mb * (1 << 20) + (256 << 20)
    free = shutil.disk_usage(root).free
    if free < need:
        sys.exit(f"{root}: {free >> 20} MiB free, the benchmark needs {need >> 20} MiB; use a smaller --size-mb")
    job = root / "cache" / "job"
    total = make_source(job, args.size_mb, args.shards)
    runs = root / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir()

    cp_seconds, mirror_seconds = [], []
    for i in range(args.rounds):
        order = ("cp", "mirror") if i % 2 == 0 else ("mirror", "cp")   # alternate: neither always goes first
        for what in order:
            dest = runs / f"{what}-{i}"
            if what == "cp":
                cp_seconds.append(timed_cp(job / NAME, dest))
            else:
                mirror_seconds.append(timed_mirror(job, dest / "job", total, args.workers))
            if i < args.rounds - 1 or what == "cp":
                shutil.rmtree(dest)
        print(f"round {i + 1}: cp {total / MB / cp_seconds[-1]:.0f} MB/s, "
              f"mirror {total / MB / mirror_seconds[-1]:.0f} MB/s", flush=True)

    kept = runs / f"mirror-{args.rounds - 1}" / "job"
    remirrors = [remirror(job, kept, "checkpoint_0002000", "renamed", args.workers),
                 remirror(job, kept, "checkpoint_0003000", "copied", args.workers)]
    shutil.rmtree(runs)

    cp_mbs = statistics.median(total / MB / s for s in cp_seconds)
    mirror_mbs = statistics.median(total / MB / s for s in mirror_seconds)
    result = {
        "size_bytes": total, "shards": args.shards, "rounds": args.rounds, "workers": args.workers,
        "cp_seconds": cp_seconds, "mirror_seconds": mirror_seconds,
        "cp_median_mb_s": cp_mbs, "mirror_median_mb_s": mirror_mbs, "ratio_mirror_to_cp": mirror_mbs / cp_mbs,
        "remirror": remirrors, "goals": {"ratio_mirror_to_cp": ">= 0.9", "remirror_copied_pct": "< 1"},
    }
    (root / "mirror.json").write_text(json.dumps(result, indent=2) + "\n")

    print(f"\ncheckpoint: {total / MB:.0f} MB in {args.shards} shards, {args.rounds} rounds, median")
    print(f"{'':28}{'MB/s':>10}")
    print(f"{'cp -r + sync':28}{cp_mbs:>10.0f}")
    print(f"{'Mirror.sync_once()':28}{mirror_mbs:>10.0f}")
    print(f"{'ratio mirror/cp':28}{mirror_mbs / cp_mbs:>10.2f}   (goal >= 0.9)")
    for r in remirrors:
        print(f"{'re-mirror, ' + r['how']:28}{r['copied_pct']:>9.3f}%   of the bytes copied (goal < 1%), "
              f"{r['seconds']:.2f} s")
    print(f"\nwrote {root / 'mirror.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
