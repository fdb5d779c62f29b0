"""`multinode operator`: run the controller (kopf) against the current kubeconfig or in-cluster identity."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from multinode import __version__
from multinode.api.constants import OPERATOR_HEALTH_PORT, OPERATOR_METRICS_PORT
from multinode.controller.settings import LeaderElection, OperatorSettings
from multinode.render import DEFAULT_OPERATOR_IMAGE

# The exit status of a leader that lost its Lease (Kubernetes restarts it, as a standby).
LOST_LEASE_EXIT_CODE = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", "-n", action="append", dest="namespaces",
                        help="watch only this namespace (repeatable), or every namespace a kopf glob matches "
                             "(team-*; !team-skip excludes), which needs list and watch on namespaces; default: "
                             "MULTINODE_NAMESPACES (comma-separated) or all")
    parser.add_argument("--operator-image",
                        help="image of the jobs' preflight init containers and checkpoint mirror pods (default: "
                             f"MULTINODE_OPERATOR_IMAGE, else {DEFAULT_OPERATOR_IMAGE})")
    parser.add_argument("--workers", type=int, help="jobs reconciled at once")
    parser.add_argument("--liveness", default=None,
                        help="serve kopf's liveness probe at this URL, e.g. "
                             f"http://0.0.0.0:{OPERATOR_HEALTH_PORT}/healthz (the chart's health.port; not the "
                             f"metrics port, {OPERATOR_METRICS_PORT})")
    parser.add_argument("--metrics-port", type=int, default=OPERATOR_METRICS_PORT,
                        help="Prometheus /metrics port; 0 disables it")
    parser.add_argument("--metrics-address", default="0.0.0.0")
    parser.add_argument("--verbose", "-v", action="store_true")
    election = parser.add_argument_group(
        "leader election", "replicas compete for a coordination.k8s.io Lease; only its holder acts "
        "(default: MULTINODE_LEADER_ELECTION, else off)")
    election.add_argument("--leader-election", action=argparse.BooleanOptionalAction, default=None,
                          help="take the Lease before acting")
    election.add_argument("--lease-name", help="default: MULTINODE_LEASE_NAME or multinode-operator")
    election.add_argument("--lease-namespace", dest="lease_namespace",
                          help="default: MULTINODE_LEASE_NAMESPACE, POD_NAMESPACE, the service account's")
    election.add_argument("--leader-identity", help="default: the pod name (hostname) and a random suffix")
    election.add_argument("--lease-duration", type=float, help="seconds (default 15)")
    election.add_argument("--renew-deadline", type=float, help="seconds (default 10)")
    election.add_argument("--retry-period", type=float, help="seconds (default 2)")


def run(args: argparse.Namespace) -> int:
    # Imported here so `multinode preflight` (the init container) does not pay for kopf and the client.
    import kopf

    from prometheus_client import start_http_server

    from multinode.controller.handlers import build_registry
    from multinode.metrics.operator import OperatorMetrics

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # kopf logs every handler call at INFO; that is noise at our event rates.
    logging.getLogger("kopf").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    logging.getLogger("kopf.activities.startup").setLevel(logging.INFO)
    # The first line of every operator log says which build runs (so does the multinode_build_info metric),
    # before a bad setting can end the process.
    logging.getLogger("multinode").info("multinode operator %s starting", __version__)
    settings = OperatorSettings.from_env(
        namespaces=tuple(args.namespaces) if args.namespaces else None,
        operator_image=args.operator_image, workers=args.workers)
    metrics = OperatorMetrics()
    election = LeaderElection.from_env(
        args.leader_election, name=args.lease_name, namespace=args.lease_namespace,
        identity=args.leader_identity, lease_duration_seconds=args.lease_duration,
        renew_deadline_seconds=args.renew_deadline, retry_period_seconds=args.retry_period)
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.metrics_address, registry=metrics.registry)

    async def operate(stop_flag: asyncio.Event | None) -> None:
        await kopf.operator(
            stop_flag=stop_flag,
            registry=build_registry(settings, metrics),
            # kopf watches nothing itself (controller/handlers.py): the namespaces are our informers' to follow.
            clusterwide=True,
            # kopf's peering is not used: with leader election only the Lease holder runs kopf at all.
            standalone=True,
            liveness_endpoint=args.liveness,
            identity=operator_identity(),  # type: ignore[arg-type]  # kopf.Identity: a NewType of str kopf does not export
        )

    if election is None:
        metrics.leader.set(1)  # the only replica: it always acts
        asyncio.run(operate(None))
    else:
        asyncio.run(lead(election, operate, args.liveness, lambda leading: metrics.leader.set(int(leading))))
    return 0


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT. Needed while standing by: in a container the operator is PID 1, and
    the kernel delivers no signal to PID 1 that has no handler, so a standby would ignore the kubelet's
    SIGTERM and be killed only at the end of the grace period (30 s of every rolling upgrade)."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    return stopping


async def lead(election: LeaderElection, operate: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
               liveness: str | None, on_change: Callable[[bool], None]) -> None:
    """Wait for the Lease (answering the probes as a standby), then run kopf while renewing it. Losing it
    ends the process at once, mid-reconcile or not: a replica without the Lease must not write another
    byte, and its restart (as a standby) clears every in-memory state. On a graceful stop (SIGTERM) a
    standby ends at once; a leader's kopf stops its workers first, then the Lease is released, so a standby
    takes over within a retry period."""
    from multinode.controller.kube import KubeApi
    from multinode.controller.leader import LeaderElector, StandbyHealth

    stopping = stop_on_signals()
    timings = election.timings
    kube = KubeApi.connect(2, timeout=timings.renew_deadline_seconds / 2)
    elector = LeaderElector(kube, election, on_change)
    health = StandbyHealth(liveness) if liveness else None
    if health is not None:
        await health.start()
    on_change(False)
    acquiring = asyncio.create_task(elector.acquire(), name="multinode-acquire")
    stopped = asyncio.create_task(stopping.wait(), name="multinode-stop")
    await asyncio.wait({acquiring, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if health is not None:
        await health.close()  # kopf's liveness endpoint takes the port
    if not acquiring.done() or stopping.is_set():
        logging.getLogger("multinode.leader").info("stopping as a standby: a signal came before the Lease")
        for task in (acquiring, stopped):
            task.cancel()
        await asyncio.gather(acquiring, stopped, return_exceptions=True)
        if acquiring.done() and not acquiring.cancelled() and acquiring.exception() is None:
            await elector.release()  # it got the Lease in the same moment: hand it back
        await kube.close()
        return
    stopped.cancel()
    acquiring.result()
    # kopf takes the signals from here; a signal that came before it did is its stop flag, already set.
    holding = asyncio.create_task(elector.hold(), name="multinode-lease")
    operating = asyncio.create_task(operate(stopping), name="multinode-kopf")
    try:
        await asyncio.wait({holding, operating}, return_when=asyncio.FIRST_COMPLETED)
        if holding.done():
            logging.getLogger("multinode.leader").critical("exiting: this replica no longer holds the Lease")
            logging.shutdown()
            os._exit(LOST_LEASE_EXIT_CODE)
        operating.result()  # kopf's own error, if it failed
    finally:
        holding.cancel()
        await asyncio.gather(holding, return_exceptions=True)
        await elector.release()
        await kube.close()


def operator_identity() -> str:
    """Who this operator is in kopf's logs: the pod name (the hostname) and the pid.

    Given explicitly because kopf's default asks the password database for the user name, and a container
    that runs as a numeric uid with no passwd entry (the chart's 65532, `runAsNonRoot`) has none:
    `getpwuid(): uid not found` at start-up, a crash loop.
    """
    return f"{socket.gethostname()}-{os.getpid()}"
