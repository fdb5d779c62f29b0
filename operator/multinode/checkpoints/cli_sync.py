"""One mirror pass as a process: `python -m multinode.checkpoints.cli_sync <source> <dest>`.

For tests that kill it at random moments (tests/unit/checkpoints/test_crash_safety.py) and for trying
the engine by hand. Prints `ready` on stdout when the pass starts and a JSON summary when it ends;
exits 1 when the pass reported a problem.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from multinode.checkpoints.layouts import Completion
from multinode.checkpoints.mirror_pass import Mirror


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m multinode.checkpoints.cli_sync", description=__doc__)
    parser.add_argument("source", type=Path, help="the job's cache directory")
    parser.add_argument("dest", type=Path, help="the job's directory on the backed-up volume")
    parser.add_argument("--completion", choices=[c.value for c in Completion], default=Completion.AUTO.value)
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--settle-seconds", type=float, default=60.0)
    parser.add_argument("--final", action="store_true", help="the job has ended: nothing needs to settle")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    mirror = Mirror(args.source, args.dest, completion=Completion(args.completion), keep=args.keep,
                    workers=args.workers, settle_seconds=args.settle_seconds)
    print("ready", flush=True)
    report = mirror.sync_once(final=args.final)
    print(json.dumps({
        "mirrored": [c.name for c in report.mirrored], "pruned": report.pruned,
        "problems": [vars(p) for p in report.problems], "latest": report.latest.name if report.latest else None,
        "bytes_copied": report.bytes_copied, "bytes_linked": report.bytes_linked, "seconds": report.seconds,
    }), flush=True)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
