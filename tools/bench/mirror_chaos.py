"""Benchmark (slow tier): the randomized writer against a running Mirror, hundreds of runs.

    .venv/bin/python -P tools/bench/mirror_chaos.py [--runs 300] [--ops 40] [--first-seed 1000]

Each run (multinode/testing/mirror_chaos.py) starts a writer thread that saves checkpoints in the layouts
with exact completeness rules and, at random points, rewrites them in place, appends, renames, deletes
and crashes mid-save, while the main thread runs `Mirror.sync_once()` passes; after every pass, every
published checkpoint must verify (sha256 of every file) and be exactly one complete state the writer
produced. Reports runs, passes, published checkpoints checked and violations (goal: 0), prints the
first violations with their seed (rerun one with `--first-seed N --runs 1`), and writes
.cache/bench/mirror_chaos.json. Not part of `make test` (six seeds of it are).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from multinode.testing.mirror_chaos import run_once

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--ops", type=int, default=40, help="writer operations per run")
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=REPO / ".cache" / "bench")
    parser.add_argument("--no-open-windows", dest="open_windows", action="store_false",
                        help="write through temporary names and delete by renaming aside, as make test does")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a run has a violation")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    # The mirror logs every problem it meets as a WARNING; here they are expected, and counted instead.
    logging.getLogger("multinode.checkpoints").setLevel(logging.ERROR)

    started = time.monotonic()
    passes = checked = 0
    violations: list[str] = []
    operations: Counter = Counter()
    problems: Counter = Counter()
    for seed in range(args.first_seed, args.first_seed + args.runs):
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="chaos-") as root:
            result = run_once(seed, Path(root), ops=args.ops, open_windows=args.open_windows)
        passes += result.passes
        checked += result.checked
        violations += result.violations
        operations.update(result.counts)
        problems.update(result.problems)
        if result.violations:
            print(f"seed {seed}: {len(result.violations)} violation(s): {result.violations[0]}", flush=True)
    seconds = time.monotonic() - started

    summary = {"runs": args.runs, "ops_per_run": args.ops, "first_seed": args.first_seed,
               "open_windows": args.open_windows, "passes": passes,
               "published_checked": checked, "violations": len(violations), "first_violations": violations[:20],
               "operations": dict(sorted(operations.items())),
               "mirror_problems": dict(sorted(problems.items())), "seconds": round(seconds, 1),
               "goals": {"violations": "0"}}
    (args.dir / "mirror_chaos.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\n{args.runs} runs of {args.ops} writer operations, {seconds:.0f} s")
    print(f"mirror passes: {passes}, published checkpoints checked after them: {checked}")
    print("writer: " + ", ".join(f"{k} {v}" for k, v in sorted(operations.items())))
    print("mirror problems met: " + ", ".join(f"{k} {v}" for k, v in sorted(problems.items())))
    print(f"violations: {len(violations)}   (goal 0)")
    print(f"\nwrote {args.dir / 'mirror_chaos.json'}")
    return 1 if violations and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
