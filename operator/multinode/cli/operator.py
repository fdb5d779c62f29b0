"""`multinode operator`: run the controller (kopf) against the current kubeconfig or in-cluster identity."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket

from multinode.api.constants import OPERATOR_METRICS_PORT
from multinode.controller.settings import OperatorSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", "-n", action="append", dest="namespaces",
                        help="watch only this namespace (repeatable); default: MULTINODE_NAMESPACES or all")
    parser.add_argument("--operator-image", help="image of the preflight init container")
    parser.add_argument("--workers", type=int, help="jobs reconciled at once")
    parser.add_argument("--liveness", default=None, help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--metrics-port", type=int, default=OPERATOR_METRICS_PORT,
                        help="Prometheus /metrics port; 0 disables it")
    parser.add_argument("--metrics-address", default="0.0.0.0")
    parser.add_argument("--verbose", "-v", action="store_true")


def run(args: argparse.Namespace) -> int:
    # Imported here so `multinode preflight` (the init container) does not pay for kopf and the client.
    import kopf

    from prometheus_client import start_http_server

    from multinode.controller.handlers import build_registry
    from multinode.metrics.operator import OperatorMetrics

    settings = OperatorSettings.from_env(
        namespaces=tuple(args.namespaces) if args.namespaces else None,
        operator_image=args.operator_image, workers=args.workers)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # kopf logs every handler call at INFO; that is noise at our event rates.
    logging.getLogger("kopf").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    logging.getLogger("kopf.activities.startup").setLevel(logging.INFO)
    metrics = OperatorMetrics()
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.metrics_address, registry=metrics.registry)
    asyncio.run(kopf.operator(
        registry=build_registry(settings, metrics),
        clusterwide=not settings.namespaces,
        namespaces=list(settings.namespaces),
        standalone=True,  # one replica with a Recreate rollout; no peering objects needed
        liveness_endpoint=args.liveness,
        identity=operator_identity(),  # type: ignore[arg-type]  # kopf.Identity: a NewType of str kopf does not export
    ))
    return 0


def operator_identity() -> str:
    """Who this operator is in kopf's logs: the pod name (the hostname) and the pid.

    Given explicitly because kopf's default asks the password database for the user name, and a container
    that runs as a numeric uid with no passwd entry (the chart's 65532, `runAsNonRoot`) has none:
    `getpwuid(): uid not found` at start-up, a crash loop.
    """
    return f"{socket.gethostname()}-{os.getpid()}"
