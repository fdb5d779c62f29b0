"""Two operator replicas and one Lease: only the holder acts; a SIGKILLed leader is replaced by the standby,
which finishes the work in flight; a gracefully stopped one hands the Lease over at once; leaders killed
again and again while jobs are being created leave every job with exactly its pods, none twice, no orphan;
a leader cut off from the apiserver exits within its renew deadline, before the standby takes over; timings
that would let it act after that are refused at start.

Shortened timings (the benchmark, tools/bench/failover.py, uses client-go's defaults) keep this quick.
"""

from __future__ import annotations

import itertools
import signal
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from kubernetes import client

from localcluster.harness.kube import new_namespace
from localcluster.harness.operator import OperatorProcess, leader_election_env
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from localcluster import LocalCluster
from tests.support.nodepools import on_pool, own_pool
from multinode.api import LABEL_ATTEMPT, LABEL_NODE_INDEX
from multinode.cli.operator import LOST_LEASE_EXIT_CODE
from tests.support import jobs
from tests.support.faultproxy import Fault, FaultProxy

DURATION, RENEW_DEADLINE, RETRY = 6.0, 4.0, 0.5
# The least margin the rules accept, scaled down: renew deadline just above 1.2 × the retry period, lease
# duration just above renew deadline + retry period.
WORST_DURATION, WORST_RENEW_DEADLINE, WORST_RETRY = 3.7, 2.0, 1.6
# How late the test may see the cut-off leader's exit: its poll period, the process's exit, a loaded host.
EXIT_SEEN_SLACK_SECONDS = 0.4


@pytest.fixture
def ha_namespace(core: client.CoreV1Api, crd: str) -> Iterator[str]:
    # Not watched by the session operator (it watches t-*): only this test's replicas act here.
    name = new_namespace(core, prefix="ha")
    yield name
    core.delete_namespace(name)


class Replicas:
    """Operator replicas competing for one Lease in the test namespace (which they also watch)."""

    def __init__(self, kubeconfig: str, namespace: str, tmp_path: Path, extra_env: dict[str, str] | None = None):
        self.kubeconfig, self.namespace, self.tmp_path = kubeconfig, namespace, tmp_path
        self.extra_env = extra_env or {}
        self.running: dict[str, OperatorProcess] = {}
        self._ids = itertools.count()

    def start(self, kubeconfig: str | None = None, timings: tuple[float, float, float] = (DURATION, RENEW_DEADLINE,
                                                                                         RETRY)) -> OperatorProcess:
        identity = f"replica-{next(self._ids)}"
        duration, renew_deadline, retry = timings
        env = dict(self.extra_env, **leader_election_env(self.namespace, identity, duration=duration,
                                                         renew_deadline=renew_deadline, retry_period=retry))
        op = OperatorProcess(kubeconfig or self.kubeconfig, [self.namespace], self.tmp_path / f"{identity}.log",
                             extra_env=env)
        op.start()  # a standby answers the liveness probe too
        self.running[identity] = op
        return op

    def leader(self) -> tuple[str, OperatorProcess] | None:
        leading = [(i, op) for i, op in self.running.items() if op.leading()]
        assert len(leading) <= 1, f"two replicas acting at once: {[i for i, _ in leading]}"
        return leading[0] if leading else None

    def wait_leader(self, timeout: float = 30) -> tuple[str, OperatorProcess]:
        return wait_for(self.leader, timeout=timeout, what="one replica leading")

    def kill(self, identity: str) -> None:
        self.running.pop(identity).kill()

    def stop_all(self) -> None:
        for op in self.running.values():
            op.stop()
        self.running.clear()


def lease_holder(api: client.ApiClient, namespace: str) -> str:
    lease = client.CoordinationV1Api(api).read_namespaced_lease("multinode-operator", namespace)
    return lease.spec.holder_identity or ""


def assert_exactly_its_pods(core: client.CoreV1Api, custom: client.CustomObjectsApi, ns: str, name: str,
                            n: int) -> None:
    job = jobs.get_job(custom, ns, name)
    pods = jobs.job_pods(core, ns, name)
    attempt = str(job["status"].get("attempt", 0))
    indices = Counter(int(p.metadata.labels[LABEL_NODE_INDEX]) for p in pods)
    assert len(pods) == n, f"{name}: {len(pods)} pods, not {n}"
    assert sorted(indices) == list(range(n)), f"{name}: node indices {sorted(indices.elements())}"
    assert {p.metadata.labels[LABEL_ATTEMPT] for p in pods} == {attempt}, f"{name}: pods of another attempt"
    assert all(p.metadata.owner_references[0].uid == job["metadata"]["uid"] for p in pods), f"{name}: orphans"


def test_only_the_leader_acts_and_the_standby_takes_over_a_killed_one(
    core: client.CoreV1Api, api: client.ApiClient, kubeconfig: str, ha_namespace: str, tmp_path: Path
) -> None:
    ns = ha_namespace
    custom = client.CustomObjectsApi(api)
    replicas = Replicas(kubeconfig, ns, tmp_path)
    try:
        replicas.start()
        replicas.start()
        first, leader = replicas.wait_leader()
        assert lease_holder(api, ns) == first
        (second, standby), = ((i, op) for i, op in replicas.running.items() if i != first)

        jobs.apply(kubeconfig, ns, training_job("before", 4, gpus=0))
        jobs.wait_phase(custom, ns, "before", "Running", timeout=60)
        assert leader.counter("multinode_pods_created") == 4
        assert standby.counter("multinode_pods_created") == 0 and not standby.leading()

        # SIGKILL: no release. The standby waits out the Lease, then acts on work that came meanwhile.
        replicas.kill(first)
        jobs.apply(kubeconfig, ns, training_job("after", 4, gpus=0))
        assert replicas.wait_leader(timeout=DURATION + 30) == (second, standby)
        jobs.wait_phase(custom, ns, "after", "Running", timeout=60)
        assert lease_holder(api, ns) == second
        assert standby.counter("multinode_pods_created") == 4
        for name in ("before", "after"):
            assert_exactly_its_pods(core, custom, ns, name, 4)

        # A graceful stop (SIGTERM) releases the Lease: a new standby takes over well within a lease duration.
        third = replicas.start()
        assert not third.leading()
        replicas.running.pop(second).stop()
        released_at = time.monotonic()
        wait_for(third.leading, timeout=DURATION - 1, what="the standby leading after the leader released")
        assert time.monotonic() - released_at < DURATION
        assert lease_holder(api, ns) == "replica-2"
    finally:
        replicas.stop_all()


def test_a_standby_ends_at_once_on_sigterm_and_leaves_the_lease_to_the_leader(
    api: client.ApiClient, kubeconfig: str, ha_namespace: str, tmp_path: Path
) -> None:
    """In a container the operator is PID 1, which the kernel sends no signal it has no handler for: a standby
    without one ignored the kubelet's SIGTERM until the grace period's SIGKILL (30 s of every rolling upgrade).
    It handles SIGTERM itself: exit status 0 (a default SIGTERM death would be -15), the leader untouched."""
    replicas = Replicas(kubeconfig, ha_namespace, tmp_path)
    try:
        replicas.start()
        replicas.start()
        first, leader = replicas.wait_leader()
        (_, standby), = ((i, op) for i, op in replicas.running.items() if i != first)
        assert not standby.leading() and standby.proc is not None
        standby.proc.send_signal(signal.SIGTERM)
        assert standby.proc.wait(timeout=10) == 0
        assert "stopping as a standby" in standby.log_path.read_text()
        assert leader.leading() and lease_holder(api, ha_namespace) == first
    finally:
        replicas.stop_all()


def test_leaders_killed_repeatedly_while_jobs_are_created_leave_no_duplicate_or_orphan_pod(
    local_cluster: LocalCluster, core: client.CoreV1Api, api: client.ApiClient, kubeconfig: str,
    ha_namespace: str, tmp_path: Path
) -> None:
    # One pod per node: fake nodes enough for the biggest job, of a pool of the test's own.
    with own_pool(local_cluster, core, "ha", count=16) as pool:
        _kill_leaders_while_creating(core, api, kubeconfig, ha_namespace, tmp_path, pool.prefix)


def _kill_leaders_while_creating(core: client.CoreV1Api, api: client.ApiClient, kubeconfig: str, ns: str,
                                 tmp_path: Path, pool: str) -> None:
    custom = client.CustomObjectsApi(api)
    # One API call at a time: creation is slow enough that kills land in the middle of it.
    replicas = Replicas(kubeconfig, ns, tmp_path, extra_env={"MULTINODE_API_CONCURRENCY": "1"})
    sizes = {f"job-{i}": n for i, n in enumerate((12, 8, 16, 4, 12, 8))}
    kills = 0
    try:
        replicas.start()
        replicas.start()
        pending = list(sizes.items())
        while kills < 3:
            identity, leader = replicas.wait_leader(timeout=DURATION + 30)
            # Two more jobs, then wait until the leader is creating pods, then kill it mid-creation.
            for name, n in pending[:2]:
                jobs.apply(kubeconfig, ns, training_job(name, n, gpus=0,
                                                        podTemplate=on_pool(pool)))
            pending = pending[2:]
            wait_for(lambda op=leader: op.counter("multinode_pods_created") >= 3, timeout=60,
                     what="the leader creating pods")
            replicas.kill(identity)
            kills += 1
            replicas.start()  # the replacement pod, as the Deployment would start it
        assert not pending
        replicas.wait_leader(timeout=DURATION + 30)
        for name in sizes:
            jobs.wait_phase(custom, ns, name, "Running", timeout=120)
        for name, n in sizes.items():
            assert_exactly_its_pods(core, custom, ns, name, n)
        all_pods = core.list_namespaced_pod(ns).items
        assert len(all_pods) == sum(sizes.values()), "pods beyond the jobs' own"
    finally:
        replicas.stop_all()


def test_a_leader_cut_off_from_the_apiserver_exits_within_its_renew_deadline_before_the_standby_leads(
    api: client.ApiClient, kubeconfig: str, ha_namespace: str, tmp_path: Path
) -> None:
    """The worst timings accepted: the leader reaches the apiserver through a proxy that starts failing its Lease
    calls; it must exit no later than its renew deadline after its last renewal, and the standby (which reaches
    the apiserver directly) must not lead before then."""
    ns = ha_namespace
    worst = (WORST_DURATION, WORST_RENEW_DEADLINE, WORST_RETRY)
    leases = client.CoordinationV1Api(api)
    replicas = Replicas(kubeconfig, ns, tmp_path)
    with FaultProxy(kubeconfig) as proxy:
        try:
            leader = replicas.start(proxy.kubeconfig(tmp_path / "proxy.kubeconfig"), timings=worst)
            leader_identity, _ = replicas.wait_leader()
            standby = replicas.start(timings=worst)
            assert not standby.leading()
            rule = proxy.inject(Fault("status", path_regex=r"/leases/", status=503))
            give_up = time.monotonic() + WORST_DURATION + 10 * WORST_RETRY + 10
            last_renewal, exited_at = None, None
            while not standby.leading():
                lease = leases.read_namespaced_lease("multinode-operator", ns).spec
                if lease.holder_identity == leader_identity:
                    last_renewal = lease.renew_time
                if exited_at is None and leader.proc is not None and leader.proc.poll() is not None:
                    exited_at = datetime.now(timezone.utc)
                assert time.monotonic() < give_up, "the standby never took over"
                time.sleep(0.05)
            assert exited_at is not None, "the standby leads while the cut-off leader still runs"
            assert leader.proc is not None and leader.proc.returncode == LOST_LEASE_EXIT_CODE
            assert last_renewal is not None and rule.injected > 0
            acted_for = (exited_at - last_renewal).total_seconds()
            assert acted_for <= WORST_RENEW_DEADLINE + EXIT_SEEN_SLACK_SECONDS, \
                f"the leader acted {acted_for:.2f}s after its last renewal\n{leader.log_tail()}"
        finally:
            replicas.stop_all()


def test_timings_that_let_a_leader_act_after_a_standby_took_over_are_refused_at_start(
    kubeconfig: str, ha_namespace: str, tmp_path: Path
) -> None:
    """11/10/8: a leader could act until 18 s after its last renewal, a standby take over at 11 s."""
    env = leader_election_env(ha_namespace, "unsafe", duration=11, renew_deadline=10, retry_period=8)
    op = OperatorProcess(kubeconfig, [ha_namespace], tmp_path / "unsafe.log", extra_env=env)
    op.start(wait_ready=False)
    assert op.proc is not None
    assert op.proc.wait(timeout=60) != 0
    assert "the lease duration (11s) must exceed the renew deadline plus the retry period (10s + 8s)" in op.log_tail()
