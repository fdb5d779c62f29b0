"""Two operator replicas and one Lease: only the holder acts; a SIGKILLed leader is replaced by the standby,
which finishes the work in flight; a gracefully stopped one hands the Lease over at once; leaders killed
again and again while jobs are being created leave every job with exactly its pods, none twice, no orphan.

Shortened timings (the benchmark, tools/bench/failover.py, uses client-go's defaults) keep this quick.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from localcluster.harness.kube import new_namespace
from localcluster.harness.operator import OperatorProcess, leader_election_env
from localcluster.harness.trainingjobs import training_job
from localcluster.harness.waiting import wait_for
from multinode.api import LABEL_ATTEMPT, LABEL_NODE_INDEX
from tests.support import jobs

DURATION, RENEW_DEADLINE, RETRY = 6.0, 4.0, 0.5


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

    def start(self) -> OperatorProcess:
        identity = f"replica-{next(self._ids)}"
        env = dict(self.extra_env, **leader_election_env(self.namespace, identity, duration=DURATION,
                                                         renew_deadline=RENEW_DEADLINE, retry_period=RETRY))
        op = OperatorProcess(self.kubeconfig, [self.namespace], self.tmp_path / f"{identity}.log", extra_env=env)
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


def test_leaders_killed_repeatedly_while_jobs_are_created_leave_no_duplicate_or_orphan_pod(
    core: client.CoreV1Api, api: client.ApiClient, kubeconfig: str, ha_namespace: str, tmp_path: Path
) -> None:
    ns = ha_namespace
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
                jobs.apply(kubeconfig, ns, training_job(name, n, gpus=0))
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
