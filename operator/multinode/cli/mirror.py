"""`multinode mirror`: the job's checkpoint mirror pod (docs/checkpoints.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from multinode.api.constants import MIRROR_METRICS_PORT
from multinode.checkpoints.waiting import DEFAULT_STALLED_SECONDS
from multinode.mirror.liveness import DEFAULT_STUCK_AFTER_SECONDS, HEALTH_PATH


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True, type=Path, help="the job's cache dir (read-only)")
    parser.add_argument("--dest", required=True, type=Path, help="the job's dir on the backed-up volume")
    parser.add_argument("--job", required=True, help="TrainingJob name")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--completion", default="auto")
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between passes")
    parser.add_argument("--settle", type=float, default=60.0, help="settle time for markers without a barrier")
    parser.add_argument("--workers", type=int, default=8, help="files copied in parallel")
    parser.add_argument("--world-size", type=int, help="the job's ranks, for layouts with per-rank files")
    parser.add_argument("--stalled-after", type=float, default=DEFAULT_STALLED_SECONDS,
                        help="seconds the newest checkpoint may stay incomplete and unchanged before each pass "
                             "reports problem CheckpointStalled")
    parser.add_argument("--stuck-after", type=float, default=DEFAULT_STUCK_AFTER_SECONDS,
                        help=f"seconds without progress (no pass ended, no checkpoint scanned, no file staged) past "
                             f"the next pass's time before {HEALTH_PATH} answers 503 and the liveness probe fails")
    parser.add_argument("--metrics-port", type=int, default=MIRROR_METRICS_PORT,
                        help=f"port of /metrics and {HEALTH_PATH}; 0 disables both")
    parser.add_argument("--metrics-address", default="0.0.0.0")


def run(args: argparse.Namespace) -> int:
    from multinode.checkpoints import Completion, NotReady
    from multinode.metrics.mirror import MirrorMetrics
    from multinode.mirror.liveness import Liveness, serve
    from multinode.mirror.loop import MirrorLoop
    from multinode.mirror.reporter import StatusReporter, load_client

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s mirror %(message)s", stream=sys.stderr)
    metrics = MirrorMetrics(not_ready_reasons=[reason.value for reason in NotReady])
    liveness = Liveness(args.stuck_after)
    if args.metrics_port:
        serve(args.metrics_port, args.metrics_address, metrics.registry, liveness)
    loop = MirrorLoop(source=args.source, dest=args.dest,
                      reporter=StatusReporter(load_client(), args.namespace, args.job),
                      completion=Completion(args.completion), keep=args.keep, interval=args.interval,
                      settle=args.settle, metrics=metrics, workers=args.workers, world_size=args.world_size,
                      stalled_seconds=args.stalled_after, liveness=liveness)
    signal.signal(signal.SIGTERM, lambda *_: loop.stopping.set())
    return loop.run()
