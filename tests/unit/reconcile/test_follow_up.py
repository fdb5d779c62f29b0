"""A pass that wrote the status needs the pass after it only if a plan made again on the status it wrote
wants more (follow_up.py): table-driven on Plans, then the planner's own case, a finished job's TTL."""

from __future__ import annotations

import pytest

from multinode.api import TrainingJobStatus
from multinode.reconcile.follow_up import adds_nothing
from multinode.reconcile.kinds import ApiKind, ObjectRef
from multinode.reconcile.outcome import Event, Plan
from multinode.testing import stored_job
from tests.unit.reconcile.planning import pod, run


def _pod(name: str) -> dict:
    return {"kind": "Pod", "metadata": {"name": name}}


GROUPS = ApiKind("scheduling.k8s.io", "v1alpha2", "PodGroup", "podgroups")
FIRST = Plan(pods_to_create=[_pod("a-0"), _pod("a-1")], pods_to_delete=["old-0"], requeue_after=5.0,
             objects_to_delete=[ObjectRef(GROUPS, "a-0")],
             pods_to_annotate={"a-0": {"multinode.dev/attempt": "1"}},
             status=TrainingJobStatus(phase="Pending", attempt=1))

SAME_STATUS = TrainingJobStatus(phase="Pending", attempt=1)


@pytest.mark.parametrize(("again", "nothing_new"), [
    (Plan(status=SAME_STATUS), True),
    (Plan(status=SAME_STATUS, requeue_after=5.0), True),
    (Plan(status=SAME_STATUS, requeue_after=6.0), True),
    (Plan(status=SAME_STATUS, pods_to_create=[_pod("a-1")], pods_to_delete=["old-0"]), True),
    (Plan(status=SAME_STATUS, pods_to_annotate={"a-0": {"multinode.dev/attempt": "1"}}), True),
    (Plan(status=SAME_STATUS, objects_to_delete=[ObjectRef(GROUPS, "a-0")]), True),
    (Plan(status=TrainingJobStatus(phase="Running", attempt=1)), False),
    (Plan(status=SAME_STATUS, requeue_after=1.0), False),
    (Plan(status=SAME_STATUS, pods_to_create=[_pod("a-2")]), False),
    (Plan(status=SAME_STATUS, pods_to_delete=["a-0"]), False),
    (Plan(status=SAME_STATUS, pods_to_force_delete=["old-0"]), False),
    (Plan(status=SAME_STATUS, pods_to_annotate={"a-1": {"multinode.dev/attempt": "1"}}), False),
    (Plan(status=SAME_STATUS, events=[Event("Normal", "Running", "all 2 nodes running")]), False),
    (Plan(status=SAME_STATUS, delete_job=True), False),
    (Plan(status=SAME_STATUS, job_suspend=True), False),
    (Plan(status=SAME_STATUS, service={"kind": "Service", "metadata": {"name": "a"}}), False),
    (Plan(status=SAME_STATUS, objects_to_create=[{"kind": "PodGroup", "metadata": {"name": "a-1"}}]), False),
    (Plan(status=SAME_STATUS, spares_to_create=[_pod("a-s0")]), False),
])
def test_a_second_plan_adds_nothing_only_when_the_first_did_it_all(again: Plan, nothing_new: bool) -> None:
    assert adds_nothing(FIRST, again) is nothing_new


def test_a_succeeded_job_is_deleted_by_its_ttl_in_the_pass_after_the_one_that_wrote_it() -> None:
    job = stored_job(2, ttlSecondsAfterFinished=0)
    running = run(job, [pod(0), pod(1)]).status
    done = [pod(0, "Succeeded"), pod(1, "Succeeded")]
    first = run(job, done, previous=running)
    assert first.status.phase == "Succeeded" and not first.delete_job
    finished = job.model_copy(update={"status": first.status})
    again = run(finished, done, previous=first.status)
    assert again.delete_job and not adds_nothing(first, again), "the TTL pass must not be skipped"


def test_a_new_jobs_pods_in_flight_need_no_second_pass() -> None:
    job = stored_job(2)
    first = run(job, [])
    assert len(first.pods_to_create) == 2
    # The stores do not have its pods yet: the second plan asks for them again, which is no news.
    again = run(job.model_copy(update={"status": first.status}), [], previous=first.status)
    assert list(again.pods_to_create) and adds_nothing(first, again)
