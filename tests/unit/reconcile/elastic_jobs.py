"""Elastic jobs in the planner's unit tests (test_elastic.py, test_rendezvous_store.py): a job of 3 nodes, min 2;
its pods, each on a machine of its own; its rendezvous store on a machine without one."""

from __future__ import annotations

from multinode.reconcile.observe import RENDEZVOUS_STORE_INDEX, ObservedPod
from multinode.testing import stored_job
from tests.unit.reconcile.planning import pod, run

STARTED = "2026-11-20T11:00:00Z"


def elastic_job(nodes=3, minimum=2, **elastic):
    return stored_job(nodes, elastic={"minNodes": minimum, **elastic})


def node_pod(index, phase="Running", *, uid=None, **kw):
    kw.setdefault("node", f"gpu-node-{index}")
    return pod(index, phase, uid=uid or f"uid-{index}", started_at=STARTED if phase == "Running" else None, **kw)


def store_pod(attempt=0, phase="Running", **kw):
    kw.setdefault("uid", f"store-uid-{attempt}")
    kw.setdefault("node", "cpu-node")
    return ObservedPod(name=f"llama-rdzv-a{attempt}", job_name="llama", index=RENDEZVOUS_STORE_INDEX,
                       attempt=attempt, phase=phase, **kw)


def gang(n=3):
    return [node_pod(i) for i in range(n)]


def running_plan(job, n=3):
    """The job's plan once its pods run and its store is placed."""
    first = run(job, [], rendezvous_stores=())
    return run(job, gang(n), previous=first.status, rendezvous_stores=(store_pod(),))
