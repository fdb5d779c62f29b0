"""The operator converges while the API misbehaves: conflicts, throttling, server errors, slow requests,
dropped watches and 410 Gone.

Each case runs its own operator process whose kubeconfig points at a fault-injecting proxy
(tests/support/faultproxy.py) in front of the real apiserver. The test itself (kubectl, the admin
client) talks to the apiserver directly, so it sees the truth and no fault touches it. The namespace
prefix is not `t-`, so the session operator never handles these jobs.

For every case:

(a) every job converges: exactly numNodes pods (`<job>-<i>-a0`, one per index, none twice), phase
    Running once the proxy holds no request any more (a late write cannot have undone it), and
    Succeeded after the pods finish;
(b) the operator survived: the process is alive and its liveness endpoint answers when the jobs are
    done, and its log has no unhandled traceback. The rule: a traceback is tolerated only inside a log
    record of a `kopf.*` logger at WARNING or below (kopf's own retry logging); a traceback in an
    ERROR/CRITICAL record, in any record of another logger (`multinode.*`, `asyncio`, ...), or printed
    outside a log record fails the case;
(c) every rule of the case injected at least one fault, so the case cannot pass vacuously.
"""

from __future__ import annotations

import gc
import http.client
import json
import os
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client, config

from multinode.api import LABEL_ATTEMPT, LABEL_NODE_INDEX
from multinode.testing import training_job
from tests.support import jobs
from tests.support.faultproxy import Fault, FaultProxy
from localcluster.harness.kube import new_namespace
from localcluster.harness.operator import OperatorProcess
from localcluster.harness.waiting import wait_for

NUM_NODES = 3
JOB_NAMES = ("alpha", "beta")
CONVERGE_TIMEOUT = 30

POD_CREATE = r"/namespaces/[^/]+/pods$"
SERVICE_CREATE = r"/namespaces/[^/]+/services$"
JOB_STATUS = r"/trainingjobs/[^/]+/status$"
LISTS = r"/(pods|services|trainingjobs)$"  # the collections kopf lists (and watches)


@dataclass
class Case:
    id: str
    faults: list[Fault]
    env: dict[str, str] = field(default_factory=dict)


CASES = [
    # The pod was created (the request is forwarded), but the operator hears AlreadyExists, as when it
    # races a previous operator's create: it must count as success, not as an error or a second pod.
    Case("409-already-exists-on-pod-create", [
        Fault("status", method="POST", path_regex=POD_CREATE, status=409, reason="AlreadyExists",
              forward=True, times=4),
    ]),
    Case("409-conflict-on-status-patch", [
        Fault("status", method="PATCH", path_regex=JOB_STATUS, status=409, reason="Conflict", times=3,
              message="Operation cannot be fulfilled on trainingjobs.multinode.dev: the object has been "
                      "modified; please apply your changes to the latest version and try again"),
    ]),
    Case("429-retry-after-on-creates", [
        Fault("status", method="POST", path_regex=f"{POD_CREATE}|{SERVICE_CREATE}", status=429,
              retry_after=1, times=6),
    ]),
    # Active from before the operator starts, so kopf's initial LISTs meet them too. At random (p=0.3),
    # but the first matching request always fails: kopf lists only a handful of times, and a case that
    # injected nothing would prove nothing.
    Case("500-on-list-patch-create", [
        Fault("status", method="GET", path_regex=LISTS, watch=False, status=500, probability=0.3, first=1,
              times=4),
        Fault("status", method="PATCH", path_regex=JOB_STATUS, status=500, probability=0.3, first=1, times=4),
        Fault("status", method="POST", path_regex=f"{POD_CREATE}|{SERVICE_CREATE}", status=503,
              probability=0.3, first=1, times=6),
    ]),
    # Held longer than the operator's API timeout, then forwarded anyway: the client gives up, the
    # apiserver still gets the request later (a create then meets the pod the retry made; a stale
    # status patch lands after a newer one).
    Case("delay-beyond-client-timeout", [
        Fault("delay", method="POST", path_regex=POD_CREATE, seconds=5, times=2),
        Fault("delay", method="PATCH", path_regex=JOB_STATUS, seconds=5, times=2),
    ], env={"MULTINODE_API_TIMEOUT_SECONDS": "2"}),
    # Discovery does not list TrainingJobs yet when the operator starts, as in the moment after a CRD is
    # Established (or before a GitOps tool applies it): kopf scans discovery once, so the operator must
    # not start its watchers before TrainingJobs are served.
    Case("trainingjobs-not-yet-discovered-at-start", [
        Fault("status", method="GET", path_regex=r"^/apis/multinode\.dev/v1alpha1$", status=404, times=3),
    ]),
    Case("watch-streams-dropped-repeatedly", [
        Fault("drop_watch", path_regex=LISTS, events=2, seconds=1.5),
    ]),
    Case("410-gone-on-watch-resume", [
        Fault("gone_on_watch", path_regex=LISTS, times=8),
    ]),
]

RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) (?P<logger>\S+) ")
TOLERATED_LEVELS = {"DEBUG", "INFO", "WARNING"}


def unhandled_tracebacks(log: str) -> list[str]:
    """Tracebacks the rule in the module docstring does not tolerate, each with its record's first line."""
    offending = []
    record, level, logger = "<before any log record>", None, None
    for line in log.splitlines():
        m = RECORD.match(line)
        if m:
            record, level, logger = line, m["level"], m["logger"]
            continue
        if line.startswith("Traceback (most recent call last)"):
            if not (logger and logger.startswith("kopf") and level in TOLERATED_LEVELS):
                offending.append(record)
    return offending


def test_unhandled_traceback_rule() -> None:
    log = "\n".join([
        "2025-01-01 00:00:00,000 WARNING kopf.objects retrying", "Traceback (most recent call last):", "  x",
        "2025-01-01 00:00:01,000 ERROR kopf.objects gave up", "Traceback (most recent call last):", "  x",
        "2025-01-01 00:00:02,000 WARNING multinode.controller hm", "Traceback (most recent call last):",
        "2025-01-01 00:00:03,000 INFO multinode.controller fine",
    ])
    assert unhandled_tracebacks(log) == ["2025-01-01 00:00:01,000 ERROR kopf.objects gave up",
                                         "2025-01-01 00:00:02,000 WARNING multinode.controller hm"]
    assert unhandled_tracebacks("Traceback (most recent call last):\n") == ["<before any log record>"]


def _open_sockets() -> set[str]:
    sockets = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (or the listing's own fd)
        if target.startswith("socket:"):
            sockets.add(target)
    return sockets


def _describe_sockets(sockets: set[str]) -> list[str]:
    """For a failure message: the /proc/net line of each socket inode (addresses in hex)."""
    inodes = {s[len("socket:["):-1] for s in sockets}
    found = []
    for table in ("tcp", "tcp6", "udp", "unix"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            if inodes & set(line.split()):
                found.append(f"{table}: {line.strip()}")
    return found or sorted(sockets)


def test_fault_proxy_injects_counts_and_stops_without_leftovers(kubeconfig: str, tmp_path: Path) -> None:
    threads_before, sockets_before = set(threading.enumerate()), _open_sockets()
    proxy = FaultProxy(kubeconfig).start()
    try:
        admin = config.new_client_from_config(proxy.kubeconfig(tmp_path / "proxy.kubeconfig"))
        core = client.CoreV1Api(admin)
        rule = proxy.inject(Fault("status", method="GET", path_regex=r"/namespaces$", status=503, times=1))
        with pytest.raises(client.ApiException) as refused:
            core.list_namespace()
        status = json.loads(refused.value.body)
        assert (refused.value.status, status["kind"], status["reason"], status["code"]) == \
            (503, "Status", "ServiceUnavailable", 503)
        assert core.list_namespace().items, "the second request passes through to the apiserver"
        assert (rule.injected, rule.passed) == (1, 1)
        admin.rest_client.pool_manager.clear()  # the client's own keep-alive socket to the proxy
        admin.close()

        # A watch still streaming when the proxy stops: stop() must cut it rather than wait for it.
        watch = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        watch.request("GET", "/api/v1/namespaces?watch=true&timeoutSeconds=60",
                      headers=proxy.auth_headers)
        stream = watch.getresponse()
        assert stream.status == 200 and json.loads(stream.readline())["type"] == "ADDED"
        t0 = time.monotonic()
    finally:
        proxy.stop()
    assert time.monotonic() - t0 < 5
    with pytest.raises((http.client.IncompleteRead, ConnectionError)):
        while stream.read(65536):  # the rest of the events, then the cut
            pass
    stream.close()
    watch.close()
    del refused, admin, core
    gc.collect()  # the test's own client sockets go with their last (cyclic) references
    assert set(threading.enumerate()) == threads_before, "no thread left behind"
    left = _open_sockets() - sockets_before
    assert not left, f"sockets left behind: {_describe_sockets(left)}"
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", proxy.port)) != 0, "nothing listens on the proxy's port"


@pytest.fixture
def faults_namespace(core: client.CoreV1Api, crd: str) -> Iterator[str]:
    # Not `t-`: the session operator (if any runs) never touches it; this test's operator is the only one.
    name = new_namespace(core, prefix=f"faults-{uuid.uuid4().hex[:4]}")
    yield name
    core.delete_namespace(name)


@pytest.fixture
def proxy(kubeconfig: str) -> Iterator[FaultProxy]:
    with FaultProxy(kubeconfig) as p:
        yield p


def assert_exact_gang(core: client.CoreV1Api, ns: str, name: str) -> None:
    pods = jobs.job_pods(core, ns, name)
    indices = Counter(int(p.metadata.labels[LABEL_NODE_INDEX]) for p in pods)
    assert sorted(p.metadata.name for p in pods) == [f"{name}-{i}-a0" for i in range(NUM_NODES)], \
        f"{name}: exactly one pod per index, first attempt"
    assert sorted(indices) == list(range(NUM_NODES)) and max(indices.values()) == 1
    assert {p.metadata.labels[LABEL_ATTEMPT] for p in pods} == {"0"}, f"{name}: no gang restart"


def wait_running_and_ready(custom: client.CustomObjectsApi, ns: str, name: str, timeout: float) -> None:
    want = ("Running", f"{NUM_NODES}/{NUM_NODES}")

    def observed() -> tuple:
        status = jobs.get_job(custom, ns, name).get("status") or {}
        return status.get("phase"), status.get("ready")

    try:
        wait_for(lambda: observed() == want, timeout=timeout, what=f"{name} phase, ready == {want}")
    except AssertionError as e:
        raise AssertionError(f"{e}; phase, ready now: {observed()}") from None


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_operator_converges_under_api_faults(
    case: Case, proxy: FaultProxy, api: client.ApiClient, core: client.CoreV1Api, kubeconfig: str,
    faults_namespace: str, tmp_path: Path,
) -> None:
    ns = faults_namespace
    custom = client.CustomObjectsApi(api)
    rules = [proxy.inject(f) for f in case.faults]
    op = OperatorProcess(proxy.kubeconfig(tmp_path / "proxy.kubeconfig"), [ns], tmp_path / "operator.log",
                         extra_env=case.env)
    op.start()
    try:
        for name in JOB_NAMES:
            jobs.apply(kubeconfig, ns, training_job(name, NUM_NODES, gpus=0))
        for name in JOB_NAMES:
            jobs.wait_phase(custom, ns, name, "Running", timeout=CONVERGE_TIMEOUT)
        # A held request may still land late (e.g. a stale status patch): the status must be right (again)
        # after the last one did.
        wait_for(lambda: proxy.held == 0, timeout=CONVERGE_TIMEOUT, what="no request held by the proxy")
        for name in JOB_NAMES:
            wait_running_and_ready(custom, ns, name, timeout=10)
            assert_exact_gang(core, ns, name)

        for name in JOB_NAMES:  # the training processes exit 0
            for pod in jobs.job_pods(core, ns, name):
                core.patch_namespaced_pod(pod.metadata.name, ns,
                                          {"metadata": {"annotations": {jobs.FINISH_AFTER: "0s"}}})
        for name in JOB_NAMES:
            job = jobs.wait_phase(custom, ns, name, "Succeeded", timeout=CONVERGE_TIMEOUT)
            assert jobs.condition(job, "Succeeded")["reason"] == "AllNodesSucceeded"
            assert_exact_gang(core, ns, name)
        assert op.healthy(), f"operator liveness endpoint does not answer; log: {op.log_path}"
    finally:
        op.stop()
        print(f"[{case.id}] {proxy.report()}")

    log = op.log_path.read_text()
    bad = unhandled_tracebacks(log)
    assert not bad, f"unhandled tracebacks in {op.log_path}: {bad}\n{op.log_tail(60)}"
    for rule in rules:
        assert rule.injected > 0, f"the fault was never injected, the case proves nothing: {rule}"
        if rule.fault.kind == "delay":
            assert rule.client_gone > 0, f"the operator never timed out on a held request: {rule}"
