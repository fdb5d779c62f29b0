"""A lost event never means a lost job (controller/resync.py), on the real apiserver.

The operator runs behind the fault proxy (tests/support/faultproxy.py), which leaves out of every
TrainingJob watch stream the events of one job: the watch goes on, the operator never hears of that job
(no real apiserver loses an event on request; this is the fault the periodic re-list exists for). With a
re-list every few seconds the job is found, reconciled and runs; the job beside it, whose events arrive,
never counts as found. Its deletion, lost the same way, is found too, and the operator forgets it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from localcluster.harness.kube import new_namespace
from localcluster.harness.operator import OperatorProcess
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from multinode.controller.resync import DELETED, MISSING
from tests.support import jobs
from tests.support.faultproxy import Fault, FaultProxy, Rule

PREFIX = "le"
RESYNC_SECONDS = 3
UNSEEN = "unseen"
# Two LISTs in a row must miss the job before it counts (resync.py): two periods, and the reconcile after.
FOUND_WITHIN = 4 * RESYNC_SECONDS + 10


@dataclass
class BehindProxy:
    op: OperatorProcess
    proxy: FaultProxy
    losing: Rule
    namespace: str


@pytest.fixture
def behind_proxy(kubeconfig: str, crd: str, core: client.CoreV1Api, tmp_path: Path) -> Iterator[BehindProxy]:
    proxy = FaultProxy(kubeconfig).start()
    losing = proxy.inject(Fault("lose_events", path_regex=r"/trainingjobs$", watch=True, object_regex=f"^{UNSEEN}$"))
    op = OperatorProcess(proxy.kubeconfig(tmp_path / "proxy.kubeconfig"), [f"{PREFIX}-*"], tmp_path / "operator.log",
                         extra_env={"MULTINODE_RESYNC_SECONDS": str(RESYNC_SECONDS)})
    namespace = new_namespace(core, prefix=PREFIX)
    try:
        op.start()
        yield BehindProxy(op, proxy, losing, namespace)
    finally:
        op.stop()
        proxy.stop()
        core.delete_namespace(namespace)


def found(op: OperatorProcess, reason: str) -> float:
    return sum(s.value for s in op.metrics().get("multinode_jobs_found_by_resync") or []
               if s.name.endswith("_total") and s.labels.get("reason") == reason)


def test_a_job_whose_events_are_lost_is_found_by_the_relist_and_runs(
        behind_proxy: BehindProxy, kubeconfig: str, custom: client.CustomObjectsApi) -> None:
    op, proxy, namespace = behind_proxy.op, behind_proxy.proxy, behind_proxy.namespace
    jobs.apply(kubeconfig, namespace, training_job("seen", 2))
    jobs.wait_phase(custom, namespace, "seen", "Running", timeout=60)  # the operator is at work
    jobs.apply(kubeconfig, namespace, training_job(UNSEEN, 2))

    try:
        jobs.wait_phase(custom, namespace, UNSEEN, "Running", timeout=FOUND_WITHIN + 30)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{proxy.report()}\noperator log:\n{op.log_tail(40)}") from None
    assert behind_proxy.losing.injected > 0, proxy.report()  # its events really were left out
    assert found(op, MISSING) == 1
    assert f"TrainingJob {namespace}/{UNSEEN} found by the periodic re-list (Missing)" in op.log_path.read_text()

    # Found once, not at every later pass: its status is current now, though its events still never arrive.
    job = jobs.get_job(custom, namespace, UNSEEN)
    assert job["status"]["observedGeneration"] == job["metadata"]["generation"]
    passes = op.counter("multinode_job_relists")
    wait_for(lambda: op.counter("multinode_job_relists") >= passes + 2, timeout=4 * RESYNC_SECONDS,
             what="two more passes of the re-list")
    assert found(op, MISSING) == 1 and found(op, DELETED) == 0

    # Its deletion is lost too: two LISTs without it, a GET that says it is gone, and the operator forgets it.
    custom.delete_namespaced_custom_object("multinode.dev", "v1alpha1", namespace, "trainingjobs", UNSEEN)
    wait_for(lambda: found(op, DELETED) == 1, timeout=FOUND_WITHIN, what="the lost deletion found")
    phases = op.metrics().get("multinode_trainingjobs") or []
    assert sum(s.value for s in phases) == 1, phases  # only "seen" is counted now
