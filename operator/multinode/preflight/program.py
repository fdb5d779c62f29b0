"""The preflight init container (`multinode preflight`): check the node, wait until every peer's DNS name
resolves, then run the collective bandwidth test when the job asks for it.

Peers' most common multi-node bug is a worker that crashes because the master's name does not resolve
yet (headless-service DNS can lag ~30 s, and torch's TCPStore treats a failed lookup as fatal). This
waits, with a deadline, logging what it still waits for, and fails naming the peers that never resolved.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from multinode.api.constants import DEFAULT_PREFLIGHT_TIMEOUT_SECONDS, EnvName, node_dns_name
from multinode.api.health_check import HealthStatus, health_message
from multinode.preflight import bandwidth, in_place_barrier, node_checks
from multinode.preflight.bandwidth import BandwidthRequest
from multinode.preflight.node_checks import HealthRequest, NodeVerdict

log = logging.getLogger("multinode.preflight")

TERMINATION_LOG = Path("/dev/termination-log")
# How many names a log line lists before it says "and N more": 1000-node jobs must not flood the log.
NAMES_IN_A_LINE = 10


@dataclass(frozen=True)
class PreflightRequest:
    """What one node's preflight does (the arguments of `multinode preflight`, which the renderer writes)."""

    timeout: float = float(DEFAULT_PREFLIGHT_TIMEOUT_SECONDS)
    interval: float = 1.0
    peers: list[str] | None = None  # None: every node of the job, from the env contract
    make_dirs: list[str] = field(default_factory=list)
    make_dir_mode: int | None = None
    health: HealthRequest = field(default_factory=HealthRequest)
    collective: BandwidthRequest | None = None
    # failurePolicy.restartStrategy InPlace (preflight/in_place_barrier.py): the pod's attempt, as the operator
    # writes it, and where the last attempt let through is kept.
    in_place_attempt_file: Path | None = None
    in_place_state_file: Path | None = None
    # And the attempt's leader (multinode.dev/leader), read after the barrier: in an in-place gang a hot spare
    # may hold a rank under its own name, and `<job>-<index>` then resolves only while the pod it replaced
    # lingers. The trainer dials the leader alone (MASTER_ADDR), so that is the name to wait for.
    in_place_leader_file: Path | None = None
    # A hot spare (spec.spareNodes): the node is checked first, then the pod waits, without a deadline, until
    # the operator gives it a rank through the same attempt file; it has no peers to resolve.
    spare: bool = False


def resolves(name: str) -> bool:
    try:
        socket.getaddrinfo(name, None)
        return True
    except (socket.gaierror, UnicodeError):
        return False


def unresolved_names(names: Iterable[str], resolve: Callable[[str], bool] = resolves) -> list[str]:
    names = list(names)
    # Lookups are I/O bound and a 1000-node job has 1000 names: resolve them concurrently.
    with ThreadPoolExecutor(max_workers=min(32, max(1, len(names)))) as pool:
        ok = list(pool.map(resolve, names))
    return [n for n, good in zip(names, ok, strict=True) if not good]


def describe(names: list[str]) -> str:
    shown = ", ".join(names[:NAMES_IN_A_LINE])
    more = len(names) - NAMES_IN_A_LINE
    return f"{shown} and {more} more" if more > 0 else shown


def wait_for_peers(
    names: list[str],
    timeout: float,
    interval: float = 1.0,
    resolve: Callable[[str], bool] = resolves,
    log_every: float = 5.0,
) -> list[str]:
    """Return [] once every name resolves, or the names still unresolved when `timeout` runs out."""
    started = time.monotonic()
    pending = list(names)
    last_log = float("-inf")
    while True:
        pending = unresolved_names(pending, resolve)
        elapsed = time.monotonic() - started
        if not pending:
            log.info("all %d peers resolve after %.1fs", len(names), elapsed)
            return []
        if elapsed >= timeout:
            return pending
        if elapsed - last_log >= log_every:
            log.info("waiting for %d/%d peers to resolve (%.0fs of %.0fs): %s",
                     len(pending), len(names), elapsed, timeout, describe(pending))
            last_log = elapsed
        time.sleep(min(interval, max(0.0, timeout - elapsed)))


def peers_from_env(env: dict[str, str]) -> list[str]:
    """The stable DNS name of every node of the job, from the env contract the operator sets."""
    try:
        job, service = env[EnvName.MULTINODE_JOB_NAME], env[EnvName.MULTINODE_SERVICE]
        namespace, nnodes = env[EnvName.MULTINODE_NAMESPACE], int(env[EnvName.NNODES])
    except (KeyError, ValueError) as e:
        raise SystemExit(f"preflight: the env contract is incomplete ({e!r}); is this pod made by multinode?") from None
    return [node_dns_name(job, index, service, namespace) for index in range(nnodes)]


def names_to_resolve(request: PreflightRequest) -> list[str]:
    """Every node's stable name (the env contract); in an in-place gang, the attempt's leader only, unless the
    collective bandwidth test, which dials every node, runs."""
    leader = _read_text(request.in_place_leader_file) if request.collective is None else ""
    return [leader] if leader else peers_from_env(dict(os.environ))


def _read_text(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _write_termination_message(message: str) -> None:
    # The kubelet copies this file into the container status, where `kubectl describe` and our
    # status reporting show it. In a pod the kubelet has mounted the file; elsewhere (a test run as root)
    # it is not created, so the host's /dev is left alone.
    if not TERMINATION_LOG.is_file():
        return
    try:
        TERMINATION_LOG.write_text(message[:4000])
    except OSError:
        pass


def make_dirs(paths: list[str], mode: int | None = None) -> str | None:
    """Create each directory (with `mode`, when this process is the one that creates it; one that exists is
    left as it is); return a failure message naming the first one that cannot be made."""
    for path in paths:
        try:
            os.makedirs(os.path.dirname(path.rstrip("/")) or ".", exist_ok=True)
            try:
                os.mkdir(path)
            except FileExistsError:
                if not os.path.isdir(path):
                    raise
            else:
                if mode is not None:
                    os.chmod(path, mode)  # not mkdir's mode: the umask would mask it
        except OSError as e:
            return f"CacheUnavailable: cannot create {path}: {e.strerror or e}"
        log.info("directory %s is ready", path)
    return None


def check_health(request: HealthRequest) -> tuple[bool, NodeVerdict | None]:
    """Run the node health check the job asks for: (passed, its verdict; None when nothing was asked)."""
    if request.empty:
        return True, None
    verdict = node_checks.evaluate(request, node_checks.gather(request))
    if verdict.status == HealthStatus.FAILED:
        log.error("node health check failed: %s: %s", verdict.reason, verdict.message)
        return False, verdict
    log.info("node health check passed: %s", verdict.message)
    return True, verdict


def check_bandwidth(request: BandwidthRequest, names: list[str],
                    local: NodeVerdict | None) -> tuple[bool, str]:
    """Run the collective bandwidth test after the local checks passed: (passed, the termination message)."""
    log.info("collective bandwidth test: node %d of %d, %d MiB, floor %g Gbit/s per link, %gs",
             request.rank, len(names), request.size_bytes // bandwidth.MIB, request.min_gbps, request.timeout)
    found = bandwidth.check(request, names)
    if isinstance(found, str):
        log.error("%s", found)
        return False, found
    verdict, figures = found
    if verdict.status == HealthStatus.FAILED:
        log.error("node health check failed: %s: %s", verdict.reason, verdict.message)
        return False, health_message(verdict.status, verdict.reason, verdict.message, figures)
    log.info("node health check passed: %s", verdict.message)
    words = verdict.message if local is None else f"{local.message}; {verdict.message}"
    return True, health_message(HealthStatus.PASSED, verdict.reason, words, figures)


def _barrier(request: PreflightRequest) -> str | None:
    """The in-place barrier (None: passed, or not asked for); a spare's first wait has no deadline."""
    if request.in_place_attempt_file is None or request.in_place_state_file is None:
        return None
    timeout = request.timeout
    if request.spare and not request.in_place_state_file.exists():
        log.info("hot spare: the node passed its checks; waiting for a rank")
        timeout = float("inf")
    return in_place_barrier.wait_for_new_attempt(request.in_place_attempt_file, request.in_place_state_file,
                                                 timeout)


def _fail(message: str) -> int:
    log.error("%s", message)
    _write_termination_message(message)
    return 1


def run(request: PreflightRequest) -> int:
    failure = None if request.spare else _barrier(request)
    if failure:
        return _fail(failure)
    # Health first: it takes a moment and fails the node at once, before peers wait on its DNS name.
    healthy, verdict = check_health(request.health)
    message = None if verdict is None else health_message(verdict.status, verdict.reason, verdict.message)
    if not healthy:
        _write_termination_message(message or "")
        return 1
    failure = make_dirs(request.make_dirs, request.make_dir_mode)
    if failure:
        return _fail(failure)
    if request.spare:  # warm now: the node is checked and the trainer's image is pulled
        failure = _barrier(request)
        if failure:
            return _fail(failure)
        if message is not None:
            _write_termination_message(message)
        return 0
    names = request.peers or names_to_resolve(request)
    log.info("waiting up to %.0fs for %d peers to resolve: %s", request.timeout, len(names), describe(names))
    missing = wait_for_peers(names, timeout=request.timeout, interval=request.interval)
    if not missing and request.collective is not None:
        passed, message = check_bandwidth(request.collective, names, verdict)
        _write_termination_message(message)
        return 0 if passed else 1
    if not missing:
        if message is not None:  # the operator records a passed check in status.nodeStatuses too
            _write_termination_message(message)
        return 0
    message = (f"PeerDNSUnresolved: {len(missing)}/{len(names)} peers did not resolve within "
               f"{request.timeout:.0f}s: {describe(missing)}")
    log.error("%s", message)
    _write_termination_message(message)
    return 1


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s preflight %(message)s", stream=sys.stderr)
