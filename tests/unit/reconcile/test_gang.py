"""Native gang scheduling (gang.py): the mechanism per attempt, the attempt's PodGroup, what the status says."""

from __future__ import annotations

from datetime import timedelta

import pytest

from multinode.api import Phase, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.status import GangMode, SchedulingStatus
from multinode.reconcile.decision import Decision
from multinode.integrations.podgroup import POD_GROUP, ObservedPodGroup, observe_pod_group
from multinode.integrations.volcano import VOLCANO_POD_GROUP
from multinode.reconcile.gang import gang_verdict, ganging
from multinode.reconcile.kinds import GroupPrune, ObjectRef
from multinode.reconcile.outcome import Verdict
from multinode.testing import seen_integrations
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job

SHORT = "waiting for minCount pods from a gang to be scheduled"


def group(attempt: int = 0, scheduled: str | None = None, message: str | None = None, **kw) -> ObservedPodGroup:
    return ObservedPodGroup(name=f"llama-a{attempt}", job_name="llama", attempt=attempt, scheduled=scheduled,
                            reason="Unschedulable" if scheduled == "False" else None, message=message, **kw)


def test_a_new_job_gets_a_pod_group_per_attempt_created_before_its_pods_which_join_it() -> None:
    job = stored_job(3)
    result = run(job, [], gang_api=True)

    [pod_group] = result.objects_to_create
    assert pod_group["kind"] == "PodGroup" and pod_group["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert pod_group["metadata"]["name"] == "llama-a0"
    assert pod_group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert pod_group["metadata"]["ownerReferences"][0]["uid"] == "uid-123"
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in result.pods_to_create} == {"llama-a0"}
    assert result.status.scheduling is not None
    assert (result.status.scheduling.gang, result.status.scheduling.pod_group) == (GangMode.POD_GROUP, "llama-a0")


def test_a_job_that_turns_the_native_gang_off_gets_no_pod_group_and_the_fallback() -> None:
    job = stored_job(3, scheduling={"nativePodGroup": False, "partialGangTimeoutSeconds": 60})
    result = run(job, [], gang_api=True)
    assert result.objects_to_create == []
    assert not any(p["spec"].get("schedulingGroup") for p in result.pods_to_create)
    assert result.status.scheduling is not None
    assert (result.status.scheduling.gang, result.status.scheduling.pod_group) == (GangMode.NONE, None)


def test_an_observed_pod_group_is_not_created_again() -> None:
    first = run(stored_job(2), [], gang_api=True)
    again = run(stored_job(2), [pod(0, "Pending", node=None)], previous=first.status, gang_api=True,
                pod_groups=(group(),))
    assert again.objects_to_create == []
    assert [p["spec"]["schedulingGroup"]["podGroupName"] for p in again.pods_to_create] == ["llama-a0"]


def test_without_the_api_no_pod_group_and_the_status_says_none() -> None:
    result = run(stored_job(2), [], gang_api=False)
    assert result.objects_to_create == []
    assert not any("schedulingGroup" in p["spec"] for p in result.pods_to_create)
    assert result.status.scheduling is not None and result.status.scheduling.gang == GangMode.NONE


def test_spec_pod_group_leaves_the_gang_to_the_external_scheduler() -> None:
    result = run(stored_job(2, podGroup={}), [], gang_api=True)
    assert result.objects_to_create == [] and result.status.scheduling.gang == GangMode.EXTERNAL
    assert not any("schedulingGroup" in p["spec"] for p in result.pods_to_create)


def test_the_mechanism_is_kept_for_the_attempt_even_if_discovery_changes() -> None:
    first = run(stored_job(2), [], gang_api=True)
    later = run(stored_job(2), [pod(0, "Pending", node=None)], previous=first.status, gang_api=False)
    assert [p["spec"]["schedulingGroup"]["podGroupName"] for p in later.pods_to_create] == ["llama-a0"]


def test_an_attempt_started_before_gangs_existed_stays_without_a_group() -> None:
    started = run(stored_job(2), [], gang_api=False).status
    started.scheduling = None  # as written by an operator that knew nothing of gangs
    result = run(stored_job(2), [pod(0, "Pending", node=None)], previous=started, gang_api=True)
    assert result.objects_to_create == [] and not any("schedulingGroup" in p["spec"] for p in result.pods_to_create)
    assert result.status.scheduling.gang == GangMode.NONE


def test_a_gang_that_does_not_fit_says_so_with_the_scheduler_s_words_and_the_telling_pod() -> None:
    job = stored_job(2)
    pods = [pod(0, "Pending", node=None, unschedulable=f"pod group is unschedulable, {SHORT}"),
            pod(1, "Pending", node=None, unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")]
    first = run(job, [], gang_api=True)
    result = run(job, pods, previous=first.status, gang_api=True,
                 pod_groups=(group(scheduled="False", message="0/1 placements are available"),))

    assert result.status.phase == Phase.PENDING
    running, gang = condition(result.status, "Running"), condition(result.status, "GangScheduled")
    assert running.reason == gang.reason == "GangUnschedulable" and gang.status == "False"
    assert gang.message == ("the gang of 2 pods does not fit, none is bound (no GPU held); PodGroup llama-a0: "
                            "0/1 placements are available; llama-1-a0: 0/3 nodes are available: 3 Insufficient "
                            "nvidia.com/gpu.")


def test_a_gang_not_decided_yet_waits_for_scheduling_and_a_placed_one_says_placed() -> None:
    job = stored_job(2)
    first = run(job, [], gang_api=True)
    waiting = run(job, [pod(0, "Pending", node=None), pod(1, "Pending", node=None)], previous=first.status,
                  gang_api=True, pod_groups=(group(),))
    assert condition(waiting.status, "GangScheduled").reason == "WaitingForScheduling"
    assert condition(waiting.status, "Running").reason == "WaitingForScheduling"

    placed = run(job, [pod(0), pod(1)], previous=waiting.status, gang_api=True, pod_groups=(group(scheduled="True"),))
    gang = condition(placed.status, "GangScheduled")
    assert (gang.status, gang.reason) == ("True", "GangPlaced")
    assert placed.status.phase == Phase.RUNNING


def test_a_restart_uses_a_new_group_and_deletes_the_old_one() -> None:
    job = stored_job(2)
    first = run(job, [], gang_api=True)
    running = run(job, [pod(0), pod(1)], previous=first.status, gang_api=True, pod_groups=(group(scheduled="True"),))
    failed = run(job, [pod(0), pod(1, "Failed", exit_code=1)], previous=running.status, gang_api=True,
                 pod_groups=(group(scheduled="True"),))
    assert failed.status.phase == Phase.RESTARTING and failed.status.scheduling.pod_group is None

    later = NOW + timedelta(minutes=10)
    next_attempt = run(job, [], previous=failed.status, now=later, gang_api=True, pod_groups=(group(scheduled="True"),))
    assert [o.name for o in next_attempt.objects_to_delete] == ["llama-a0"]
    assert [o["metadata"]["name"] for o in next_attempt.objects_to_create] == ["llama-a1"]
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in next_attempt.pods_to_create} == {"llama-a1"}


def test_a_group_already_terminating_is_not_deleted_again() -> None:
    result = run(stored_job(2), [], gang_api=True, pod_groups=(group(attempt=0, terminating=True),),
                 previous=run(stored_job(2), [], gang_api=True).status.model_copy(update={"attempt": 1}))
    assert result.objects_to_delete == []


def test_observe_pod_group_reads_labels_and_the_scheduled_condition() -> None:
    body = {"metadata": {"name": "llama-a3",
                         "labels": {"multinode.dev/job-name": "llama", "multinode.dev/attempt": "3"}},
            "status": {"conditions": [{"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": "no"}]}}
    assert observe_pod_group(body) == ObservedPodGroup(name="llama-a3", job_name="llama", attempt=3, scheduled="False",
                                                       reason="Unschedulable", message="no")
    assert observe_pod_group({"metadata": {"name": "other", "labels": {}}}) is None


def test_topology_becomes_the_group_s_constraint_and_the_scheduler_picks_the_domain() -> None:
    from tests.unit.reconcile.test_placement import nodes

    job = stored_job(2, resourcesPerNode={"gpus": 8}, topology={"sameDomainLabel": "block"})
    cluster = nodes({"block-0": 3, "block-1": 2})
    first = run(job, [], gang_api=True, nodes=cluster)
    [pod_group] = first.objects_to_create
    assert pod_group["spec"]["schedulingConstraints"] == {"topology": [{"key": "block"}]}
    # The pods wait for the stored group, which says whether the apiserver kept the constraint.
    assert first.pods_to_create == [] and condition(first.status, "Running").reason == "CreatingPods"
    # Without the group's watch event (a restarted watch can miss it), the timer brings the next pass.
    assert first.requeue_after is not None and first.requeue_after <= 5

    kept = run(job, [], previous=first.status, gang_api=True, nodes=cluster,
               pod_groups=(group(topology_keys=("block",)),))
    assert kept.objects_to_create == [] and len(kept.pods_to_create) == 2
    assert not any("block" in p["spec"].get("nodeSelector", {}) for p in kept.pods_to_create)
    assert kept.status.topology_domain is None

    bound = [pod(0, node="block-1-0"), pod(1, node="block-1-1")]
    placed = run(job, bound, previous=kept.status, gang_api=True, nodes=cluster,
                 pod_groups=(group(scheduled="True", topology_keys=("block",)),))
    assert placed.status.topology_domain == "block-1"


def test_a_constraint_the_apiserver_dropped_leaves_the_domain_to_the_operator() -> None:
    from tests.unit.reconcile.test_placement import nodes

    job = stored_job(2, resourcesPerNode={"gpus": 8}, topology={"sameDomainLabel": "block"})
    cluster = nodes({"block-0": 3, "block-1": 2})
    first = run(job, [], gang_api=True, nodes=cluster)
    dropped = run(job, [], previous=first.status, gang_api=True, nodes=cluster, pod_groups=(group(),))
    assert {p["spec"]["nodeSelector"]["block"] for p in dropped.pods_to_create} == {"block-0"}
    assert dropped.status.topology_domain == "block-0"


def test_a_preempted_gang_restarts_without_counting_in_a_group_of_its_own() -> None:
    job = stored_job(2)
    first = run(job, [], gang_api=True)
    running = run(job, [pod(0), pod(1)], previous=first.status, gang_api=True, pod_groups=(group(scheduled="True"),))
    # The scheduler marks the victims (DisruptionTarget, PreemptionByScheduler) and deletes them.
    marked = [pod(i, disruption="PreemptionByScheduler") for i in range(2)]
    seen = run(job, marked, previous=running.status, gang_api=True, pod_groups=(group(scheduled="True"),))
    gone = run(job, [], previous=seen.status, gang_api=True, pod_groups=(group(scheduled="True"),))

    status = gone.status
    assert status.phase == Phase.RESTARTING and (status.restarts, status.uncounted_restarts) == (0, 1)
    assert status.restart_history[-1].reason == "Preempted"
    assert "preempted by the scheduler" in status.restart_history[-1].message
    later = run(job, [], previous=status, now=NOW + timedelta(minutes=10), gang_api=True,
                pod_groups=(group(scheduled="True"),))
    assert [o["metadata"]["name"] for o in later.objects_to_create] == ["llama-a1"]


def test_a_gang_preempted_and_deleted_between_two_passes_still_says_preempted() -> None:
    # The scheduler patches DisruptionTarget and deletes at once; the pass after sees no pod at all, only
    # what the controller kept from the pods' last watch events.
    job = stored_job(2)
    first = run(job, [], gang_api=True)
    running = run(job, [pod(0), pod(1)], previous=first.status, gang_api=True, pod_groups=(group(scheduled="True"),))
    gone = run(job, [], previous=running.status, gang_api=True, pod_groups=(group(scheduled="True"),),
               gone_disruptions={"llama-0-a0": "PreemptionByScheduler", "llama-1-a0": "PreemptionByScheduler"})
    assert gone.status.restart_history[-1].reason == "Preempted"
    assert (gone.status.restarts, gone.status.uncounted_restarts) == (0, 1)
    # Without that memory (an operator restarted in between) it is a lost node, uncounted all the same.
    lost = run(job, [], previous=running.status, gang_api=True, pod_groups=(group(scheduled="True"),))
    assert lost.status.restart_history[-1].reason == "NodeLost"
    assert (lost.status.restarts, lost.status.uncounted_restarts) == (0, 1)


def test_pods_created_by_an_operator_killed_before_its_status_write_decide_the_group() -> None:
    # No status at all (the killed operator never wrote one), some pods already joined llama-a0.
    result = run(stored_job(3), [pod(0, "Pending", node=None, pod_group="llama-a0")], gang_api=True,
                 pod_groups=(group(),))
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in result.pods_to_create} == {"llama-a0"}
    assert result.status.scheduling.gang == GangMode.POD_GROUP


# The policies called directly.

def _attempt(gang: GangMode, attempt: int = 1, pod_group: str | None = "llama-a1") -> TrainingJobStatus:
    return TrainingJobStatus(attempt=attempt, scheduling=SchedulingStatus(gang=gang, pod_group=pod_group))


@pytest.mark.parametrize(("groups", "deleted"), [
    ((), ()),
    ((group(0), group(1)), ("llama-a0",)),                       # only earlier attempts' groups
    ((group(0, terminating=True), group(1)), ()),                # one going already is not deleted again
])
def test_earlier_attempts_groups_are_deleted(groups, deleted) -> None:
    [native] = [s for s in seen_integrations(gang_api=True, pod_groups=groups) if s.integration.name == "podgroup"]
    assert native.integration.live_objects(stored_job(2), TrainingJobStatus(attempt=1), native) == Decision(
        objects_to_delete=tuple(ObjectRef(POD_GROUP, name) for name in deleted))


@pytest.mark.parametrize(("spec", "status", "groups", "created", "pruned"), [
    ({}, _attempt(GangMode.POD_GROUP), (), ["PodGroup"], ()),                       # native: created when missing
    ({}, _attempt(GangMode.POD_GROUP), (group(1),), [], ()),                        # ... and not again
    ({}, _attempt(GangMode.POD_GROUP), (group(1, terminating=True),), ["PodGroup"], ()),
    ({}, _attempt(GangMode.NONE, pod_group=None), (), [], ()),
    ({}, _attempt(GangMode.EXTERNAL, pod_group=None), (), [], ()),
    ({"scheduling": {"volcano": {}}}, _attempt(GangMode.VOLCANO), (), ["PodGroup"],
     (GroupPrune(VOLCANO_POD_GROUP, "llama", 1),)),                                 # a gang scheduler's: each pass
])
def test_the_attempts_pod_group_is_created_before_its_pods(spec, status, groups, created, pruned) -> None:
    gang = ganging(status, seen_integrations(gang_api=True, pod_groups=groups))
    decided = gang.integration.attempt_objects(stored_job(2, **spec), status, gang) if gang else Decision()
    assert [o["kind"] for o in decided.objects_to_create] == created and decided.objects_to_prune == pruned


JUDGED = Verdict(Phase.PENDING, Reason.UNSCHEDULABLE, "2/2 pods cannot be scheduled")


@pytest.mark.parametrize(("gang", "current", "groups", "condition_", "verdict_reason"), [
    (GangMode.NONE, {}, (), None, Reason.UNSCHEDULABLE),                                    # no group: the judge's
    (GangMode.POD_GROUP, {0: pod(0), 1: pod(1)}, (group(1, "True"),), ("True", Reason.GANG_PLACED),
     Reason.UNSCHEDULABLE),
    (GangMode.POD_GROUP, {0: pod(0, "Pending", node=None, unschedulable=SHORT)}, (group(1, "False", "no room"),),
     ("False", Reason.GANG_UNSCHEDULABLE), Reason.GANG_UNSCHEDULABLE),                     # the group's words win
    (GangMode.POD_GROUP, {}, (group(1),), ("False", Reason.WAITING_FOR_SCHEDULING), Reason.UNSCHEDULABLE),
])
def test_the_gang_scheduled_condition_and_the_verdict_of_a_gang_that_does_not_fit(gang, current, groups,
                                                                                  condition_, verdict_reason) -> None:
    status = _attempt(gang)
    decided = gang_verdict(stored_job(2), status, current,
                           ganging(status, seen_integrations(gang_api=True, pod_groups=groups)), JUDGED)
    assert decided.verdict is not None and decided.verdict.reason == verdict_reason
    assert [(c.status, c.reason) for c in decided.conditions] == ([condition_] if condition_ else [])
