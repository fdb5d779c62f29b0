"""The commands the job's pods run, as render/ writes them: `multinode preflight` (every node pod's init
container) and `multinode mirror` (the checkpoint mirror pod, docs/checkpoints.md). Here only their arguments
are parsed; the programs are multinode.preflight and multinode.mirror.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from multinode.api.constants import DEFAULT_PREFLIGHT_TIMEOUT_SECONDS, MIRROR_METRICS_PORT, EnvName
from multinode.api.quantity import quantity_value
from multinode.checkpoints.waiting import DEFAULT_STALLED_SECONDS
from multinode.mirror.liveness import DEFAULT_STUCK_AFTER_SECONDS, HEALTH_PATH
from multinode.preflight import program as preflight_program
from multinode.preflight.bandwidth import MIB, BandwidthRequest
from multinode.preflight.node_checks import HealthRequest
from multinode.preflight.program import PreflightRequest


def _quantity(text: str) -> int:
    try:
        return quantity_value(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_preflight_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=float, default=float(DEFAULT_PREFLIGHT_TIMEOUT_SECONDS),
                        help="seconds to wait before failing")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between rounds of lookups")
    parser.add_argument("--peers", help="comma-separated names to wait for (default: from the env contract)")
    parser.add_argument("--make-dir", action="append", default=[], metavar="PATH",
                        help="create this directory first (the job's cache dir); repeatable")
    parser.add_argument("--make-dir-mode", type=lambda value: int(value, 8), metavar="OCTAL",
                        help="permissions of a directory --make-dir creates (default: what the umask leaves)")
    parser.add_argument("--in-place-attempt-file", type=Path, metavar="PATH",
                        help="failurePolicy InPlace: the pod's attempt (a downward API file); a restarted pod waits "
                             "here for a newer one")
    parser.add_argument("--in-place-state-file", type=Path, metavar="PATH",
                        help="where the attempt last let through is kept (an emptyDir)")
    parser.add_argument("--in-place-leader-file", type=Path, metavar="PATH",
                        help="failurePolicy InPlace: the attempt's leader (a downward API file), read once the "
                             "barrier is passed; the only name resolved, not every node's")
    parser.add_argument("--spare", action="store_true",
                        help="a hot spare (spec.spareNodes): check the node, then wait without a deadline until "
                             "the operator gives the pod a rank (an attempt in --in-place-attempt-file); no peers")
    health = parser.add_argument_group("node health check (spec.healthCheck)")
    health.add_argument("--check-gpus", type=int, default=0, metavar="N", help="N GPUs must be visible")
    health.add_argument("--check-rdma", type=int, default=0, metavar="N", help="N RDMA devices, and memlock")
    health.add_argument("--rdma-env", help="env var the RDMA device plugin lists its device IDs in")
    health.add_argument("--memlock-floor", type=int, default=0, metavar="BYTES")
    health.add_argument("--check-shm", type=_quantity, metavar="QUANTITY",
                        help="/dev/shm must hold this much (shmSize)")
    ring = parser.add_argument_group("collective bandwidth test (spec.healthCheck.collectiveBandwidth)")
    ring.add_argument("--collective-min-gbps", type=float, metavar="GBPS",
                      help="run the test; a node with both ring links below this fails")
    ring.add_argument("--collective-size-mib", type=int, default=64, metavar="MIB")
    ring.add_argument("--collective-timeout", type=float, default=60.0, metavar="SECONDS")
    ring.add_argument("--node-index", type=int, metavar="N", help="this node's rank in the ring")
    ring.add_argument("--collective-port", type=int, help="default: $MASTER_PORT, the attempt's port")
    ring.add_argument("--collective-id", help="default: $MULTINODE_RDZV_ID, the attempt's id")
    ring.add_argument("--collective-bind", default="", metavar="ADDRESS", help="address to listen on (all)")


def health_request(args: argparse.Namespace) -> HealthRequest:
    return HealthRequest(gpus=args.check_gpus, rdma=args.check_rdma, rdma_env=args.rdma_env,
                         memlock_floor=args.memlock_floor, shm_bytes=args.check_shm)


def collective_request(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> BandwidthRequest | None:
    """The collective test's request; the attempt's port and id default to the env contract's."""
    if args.collective_min_gbps is None:
        return None
    try:
        port = args.collective_port or int(env[EnvName.MASTER_PORT])
        ring_id = args.collective_id or env[EnvName.MULTINODE_RDZV_ID]
    except (KeyError, ValueError) as e:
        raise SystemExit(f"preflight: the collective test needs the attempt's port and id ({e!r})") from None
    if args.node_index is None:
        raise SystemExit("preflight: the collective test needs --node-index")
    return BandwidthRequest(min_gbps=args.collective_min_gbps, size_bytes=args.collective_size_mib * MIB,
                            timeout=args.collective_timeout, rank=args.node_index, port=port, ring_id=ring_id,
                            bind_host=args.collective_bind)


def preflight_request(args: argparse.Namespace) -> PreflightRequest:
    return PreflightRequest(timeout=args.timeout, interval=args.interval,
                            peers=args.peers.split(",") if args.peers else None, make_dirs=args.make_dir,
                            make_dir_mode=args.make_dir_mode, health=health_request(args),
                            collective=collective_request(args),
                            in_place_attempt_file=args.in_place_attempt_file,
                            in_place_state_file=args.in_place_state_file,
                            in_place_leader_file=args.in_place_leader_file, spare=args.spare)


def run_preflight(args: argparse.Namespace) -> int:
    preflight_program.configure_logging()
    # The init container's PID 1: without a handler the kernel drops SIGTERM, and a pod deleted while its
    # preflight waits (for peers, or a spare for its rank) would stay Terminating for the whole grace period.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    return preflight_program.run(preflight_request(args))


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # the shell's convention: 143 for SIGTERM


def add_mirror_arguments(parser: argparse.ArgumentParser) -> None:
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


def run_mirror(args: argparse.Namespace) -> int:
    from multinode.checkpoints import Completion, NotReady
    from multinode.metrics.mirror_metrics import MirrorMetrics
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
