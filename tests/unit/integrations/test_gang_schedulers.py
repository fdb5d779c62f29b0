"""A gang scheduler the job names (spec.scheduling.volcano / coscheduling): its PodGroup per attempt, made by
the operator before the pods, the pods joined to it, the old attempt's group pruned, and no native gang."""

from __future__ import annotations

from datetime import timedelta

import pytest

from multinode.api import Phase
from multinode.api.status import GangMode
from multinode.integrations.registry import INTEGRATIONS
from multinode.integrations.volcano import VOLCANO_POD_GROUP
from multinode.reconcile.kinds import GroupPrune
from multinode.reconcile.refusals import creation_refused
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job

VOLCANO = {"volcano": {"queue": "research"}}
COSCHEDULING = {"coscheduling": {"schedulerName": "scheduler-plugins-scheduler", "scheduleTimeoutSeconds": 30}}


@pytest.mark.parametrize("gang_api", [True, False])
def test_volcano_gets_its_pod_group_and_the_pods_its_annotation_and_scheduler(gang_api: bool) -> None:
    job = stored_job(3, scheduling=VOLCANO, podTemplate={"priorityClassName": "training"})
    result = run(job, [], gang_api=gang_api)

    [group] = result.objects_to_create  # and no native PodGroup, served or not: never two gangs
    assert (group["apiVersion"], group["kind"]) == ("scheduling.volcano.sh/v1beta1", "PodGroup")
    assert group["metadata"]["name"] == "llama-a0"
    assert group["metadata"]["labels"]["multinode.dev/attempt"] == "0"
    assert group["metadata"]["ownerReferences"][0]["uid"] == "uid-123"
    assert group["spec"] == {"minMember": 3, "queue": "research", "priorityClassName": "training"}
    for manifest in result.pods_to_create:
        assert manifest["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "llama-a0"
        assert manifest["spec"]["schedulerName"] == "volcano"
        assert "schedulingGroup" not in manifest["spec"]
        assert "scheduling.x-k8s.io/pod-group" not in manifest["metadata"]["labels"]
    assert result.objects_to_prune == [GroupPrune(VOLCANO_POD_GROUP, "llama", 0)]
    assert result.status.scheduling is not None
    assert (result.status.scheduling.gang, result.status.scheduling.pod_group) == (GangMode.VOLCANO, "llama-a0")


def test_coscheduling_gets_its_pod_group_and_the_pods_its_label_and_the_scheduler_named() -> None:
    result = run(stored_job(2, scheduling=COSCHEDULING), [], gang_api=True)

    [group] = result.objects_to_create
    assert (group["apiVersion"], group["kind"]) == ("scheduling.x-k8s.io/v1alpha1", "PodGroup")
    assert group["spec"] == {"minMember": 2, "scheduleTimeoutSeconds": 30}
    for manifest in result.pods_to_create:
        assert manifest["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "llama-a0"
        assert manifest["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert "scheduling.k8s.io/group-name" not in manifest["metadata"].get("annotations", {})
    assert result.status.scheduling is not None and result.status.scheduling.gang == GangMode.COSCHEDULING


def test_volcano_defaults_leave_the_queue_to_volcano_and_a_named_scheduler_wins() -> None:
    result = run(stored_job(2, scheduling={"volcano": {"schedulerName": "volcano-gpu"}}), [])
    [group] = result.objects_to_create
    assert group["spec"] == {"minMember": 2}
    assert {p["spec"]["schedulerName"] for p in result.pods_to_create} == {"volcano-gpu"}


def test_a_restart_makes_the_next_attempts_group_and_prunes_the_earlier_ones() -> None:
    job = stored_job(2, scheduling=VOLCANO)
    first = run(job, [])
    failed = run(job, [pod(0, "Failed", exit_code=1), pod(1)], previous=first.status)
    assert failed.status.phase == Phase.RESTARTING
    later = NOW + timedelta(minutes=5)
    gone = run(job, [], previous=failed.status, now=later)
    assert [o["metadata"]["name"] for o in gone.objects_to_create] == ["llama-a1"]
    assert gone.objects_to_prune == [GroupPrune(VOLCANO_POD_GROUP, "llama", 1)]
    assert {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in gone.pods_to_create} == {"llama-a1"}


def test_the_gang_condition_says_who_places_the_pods() -> None:
    job = stored_job(2, scheduling=COSCHEDULING)
    first = run(job, [])
    waiting = run(job, [pod(0, "Pending", node=None, unschedulable="0/8 nodes are available: Insufficient gpu"),
                        pod(1, "Pending", node=None)], previous=first.status)
    gang = condition(waiting.status, "GangScheduled")
    assert (gang.status, gang.reason) == ("False", "WaitingForScheduling")
    assert "waiting for coscheduling to place all 2 pods together" in gang.message
    assert "Insufficient gpu" in gang.message
    placed = run(job, [pod(0), pod(1)], previous=waiting.status)
    gang = condition(placed.status, "GangScheduled")
    assert (gang.status, gang.reason) == ("True", "GangPlaced")
    assert gang.message == "coscheduling placed all 2 pods of PodGroup llama-a0 together"


def test_a_gang_scheduler_whose_crd_is_missing_keeps_the_job_pending_and_says_so() -> None:
    job = stored_job(2, scheduling=VOLCANO)
    result = run(job, [])
    refused = creation_refused(job, result, [], 404, "the server could not find the requested resource", now=NOW,
                               api_version="scheduling.volcano.sh/v1beta1", integrations=INTEGRATIONS)
    assert refused.retry and refused.plan is not None
    for type_ in ("GangScheduled", "Running"):
        found = condition(refused.plan.status, type_)
        assert (found.status, found.reason) == ("False", "GangSchedulerNotInstalled")
        assert "serves no scheduling.volcano.sh/v1beta1 PodGroup" in found.message
    assert refused.plan.status.phase == Phase.PENDING


def test_a_404_on_anything_else_is_still_transient() -> None:
    job = stored_job(2)
    refused = creation_refused(job, run(job, []), [], 404, "not found", now=NOW, api_version="v1",
                               integrations=INTEGRATIONS)
    assert refused.plan is None and refused.retry
