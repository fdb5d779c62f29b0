"""The TrainingJob's Kueue integration (integrations/kueue/): a Workload per queued job, the job held suspended
until Kueue admits it, started with the flavors' node labels, stopped and requeued on eviction, and the
Workload Finished when the job ends."""

from __future__ import annotations

from multinode.reconcile.decision import Decision
import pytest

from multinode.api import TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.integrations.kueue import kueue_gate
from datetime import timedelta

from multinode.api import Phase
from multinode.integrations.kueue import observe_workload
from multinode.integrations.registry import INTEGRATIONS
from multinode.reconcile.refusals import creation_refused
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job

QUEUE = {"kueue.x-k8s.io/queue-name": "gpus"}


def queued(num_nodes: int = 2, suspend: bool = True, **spec):
    job = stored_job(num_nodes, suspend=suspend, resourcesPerNode={"gpus": 8}, **spec)
    job.metadata.labels = dict(QUEUE)
    return job


def workload_body(*, admitted: bool = False, evicted: str | None = None, finished: bool = False, count: int = 2,
                  flavor: str = "zone-a", rv: str = "7") -> dict:
    conditions = []
    status: dict = {"conditions": conditions}
    if admitted or evicted:
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "node", "flavors": {"nvidia.com/gpu": flavor, "cpu": flavor}, "count": count}]}
        conditions.append({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": ""})
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted", "message": ""})
    else:
        conditions.append({"type": "QuotaReserved", "status": "False", "reason": "Pending",
                           "message": "couldn't assign flavors to pod set node: insufficient quota"})
    if evicted:
        conditions.append({"type": "Evicted", "status": "True", "reason": evicted, "message": "preempted by x"})
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done"})
    return {"metadata": {"name": "trainingjob-llama-abcde", "resourceVersion": rv,
                         "labels": {"multinode.dev/job-name": "llama"}},
            "spec": {"podSets": [{"name": "node", "count": count}]}, "status": status}


def observed(**kw):
    return observe_workload(workload_body(**kw))


def test_a_queued_job_gets_its_workload_and_waits_without_pods() -> None:
    job = queued(podTemplate={"priorityClassName": "training"})
    result = run(job, [], kueue_api=True, priority=1000)

    [workload] = result.objects_to_create
    assert (workload["apiVersion"], workload["kind"]) == ("kueue.x-k8s.io/v1beta2", "Workload")
    assert workload["metadata"]["name"].startswith("trainingjob-llama-")
    owner = workload["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("TrainingJob", "uid-123", True)
    spec = workload["spec"]
    assert spec["queueName"] == "gpus"
    assert spec["priorityClassRef"] == {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "training"}
    assert spec["priority"] == 1000
    [pod_set] = spec["podSets"]
    assert (pod_set["name"], pod_set["count"]) == ("node", 2)
    trainer = pod_set["template"]["spec"]["containers"][0]
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "minCount" not in pod_set  # what Kueue's defaulting webhook would drop
    assert result.pods_to_create == [] and result.status.phase == Phase.SUSPENDED
    assert condition(result.status, "KueueAdmitted").reason == "QueuedInKueue"
    assert result.job_suspend is None


def test_the_workload_is_the_same_for_the_same_job() -> None:
    first = run(queued(), [], kueue_api=True).objects_to_create[0]
    again = run(queued(), [], kueue_api=True).objects_to_create[0]
    assert first == again


def test_waiting_in_the_queue_quotes_kueue() -> None:
    result = run(queued(), [], kueue_api=True, workload=observed())
    assert result.objects_to_create == [] and result.pods_to_create == []
    assert "insufficient quota" in condition(result.status, "KueueAdmitted").message


def test_admission_unsuspends_the_job_and_the_next_pass_selects_the_flavors_nodes() -> None:
    admitted = observed(admitted=True)
    flavors = {"zone-a": {"topology.kubernetes.io/zone": "zone-a"}}
    first = run(queued(), [], kueue_api=True, workload=admitted, flavors=flavors)
    assert first.job_suspend is False and first.pods_to_create == []
    assert condition(first.status, "KueueAdmitted").reason == "AdmittedByKueue"

    started = run(queued(suspend=False), [], previous=first.status, kueue_api=True, workload=admitted,
                  flavors=flavors)
    assert len(started.pods_to_create) == 2
    assert all(p["spec"]["nodeSelector"]["topology.kubernetes.io/zone"] == "zone-a" for p in started.pods_to_create)
    assert started.status.attempt == 0 and started.status.uncounted_restarts == 0


def test_pods_wait_for_an_unknown_flavor() -> None:
    result = run(queued(suspend=False), [], kueue_api=True, workload=observed(admitted=True), flavors={})
    assert result.pods_to_create == [] and result.requeue_after is not None


def test_an_unsuspended_job_without_admission_is_suspended() -> None:
    result = run(queued(suspend=False), [], kueue_api=True, workload=observed())
    assert result.job_suspend is True and result.pods_to_create == []


def test_eviction_stops_the_job_records_an_uncounted_restart_and_clears_the_admission() -> None:
    job = queued(suspend=False)
    admitted = observed(admitted=True)
    flavors = {"zone-a": {}}
    running = run(job, [pod(0), pod(1)], kueue_api=True, workload=admitted, flavors=flavors)
    assert running.status.phase == Phase.RUNNING

    evicted = observed(evicted="Preempted")
    stopping = run(job, [pod(0), pod(1)], previous=running.status, kueue_api=True, workload=evicted,
                   flavors=flavors, now=NOW + timedelta(seconds=5))
    assert stopping.job_suspend is True
    assert sorted(stopping.pods_to_delete) == ["llama-0-a0", "llama-1-a0"]
    [record] = stopping.status.restart_history
    assert (record.reason, record.counted) == ("EvictedByKueue", False)
    assert condition(stopping.status, "KueueAdmitted").reason == "EvictedByKueue"
    assert stopping.status_writes == []  # the pods still hold their nodes

    gone = run(queued(suspend=True), [], previous=stopping.status, kueue_api=True, workload=evicted,
               now=NOW + timedelta(seconds=10))
    [write] = gone.status_writes
    assert write is not None and write.resource_version == "7"
    assert write.status["admission"] is None
    by_type = {c["type"]: c for c in write.status["conditions"]}
    assert by_type["QuotaReserved"]["status"] == "False"
    assert by_type["Admitted"]["status"] == "False"
    assert (by_type["Requeued"]["status"], by_type["Requeued"]["reason"]) == ("True", "Preempted")

    readmitted = run(queued(suspend=False), [], previous=gone.status, kueue_api=True, workload=admitted,
                     flavors=flavors, now=NOW + timedelta(seconds=20))
    assert readmitted.status.attempt == 1 and readmitted.status.uncounted_restarts == 1
    assert readmitted.status.restarts == 0 and len(readmitted.pods_to_create) == 2


def test_a_finished_job_finishes_its_workload_once() -> None:
    job = queued(suspend=False)
    flavors = {"zone-a": {}}
    admitted = observed(admitted=True)
    running = run(job, [pod(0), pod(1)], kueue_api=True, workload=admitted, flavors=flavors)
    done = run(job, [pod(0, "Succeeded"), pod(1, "Succeeded")], previous=running.status, kueue_api=True,
               workload=admitted, flavors=flavors)
    assert done.status.phase == Phase.SUCCEEDED
    after = run(job, [pod(0, "Succeeded"), pod(1, "Succeeded")], previous=done.status, kueue_api=True,
                workload=admitted)
    [write] = after.status_writes
    assert write is not None
    finished = next(c for c in write.status["conditions"] if c["type"] == "Finished")
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")
    assert run(job, [], previous=done.status, kueue_api=True, workload=observed(admitted=True, finished=True)
               ).status_writes == []


def test_numnodes_changed_while_queued_replaces_the_workload() -> None:
    result = run(queued(4), [], kueue_api=True, workload=observed(count=2))
    assert [o.name for o in result.objects_to_delete] == ["trainingjob-llama-abcde"] and result.objects_to_create == []


def test_without_kueue_served_the_job_says_so_and_follows_spec_suspend() -> None:
    result = run(queued(), [], kueue_api=False)
    assert result.objects_to_create == [] and result.status.phase == Phase.SUSPENDED
    assert condition(result.status, "KueueAdmitted").reason == "KueueNotInstalled"
    unsuspended = run(queued(suspend=False), [], kueue_api=False)
    assert len(unsuspended.pods_to_create) == 2  # a person (or another controller) runs it, as before


def test_a_workload_refused_with_404_says_kueue_is_not_installed() -> None:
    job = queued()
    result = run(job, [], kueue_api=True)
    refused = creation_refused(job, result, [], 404, "the server could not find the requested resource", now=NOW,
                               api_version="kueue.x-k8s.io/v1beta2", integrations=INTEGRATIONS)
    assert refused.retry and refused.plan is not None
    assert condition(refused.plan.status, "KueueAdmitted").reason == "KueueNotInstalled"


def test_a_job_without_a_queue_name_has_nothing_to_do_with_kueue() -> None:
    result = run(stored_job(2), [], kueue_api=True)
    assert result.objects_to_create == [] and len(result.pods_to_create) == 2
    assert all(c.type != "KueueAdmitted" for c in result.status.conditions)


# The gate called directly: what it lets the job do, and the KueueAdmitted condition it sets.

RAN = TrainingJobStatus(phase="Running", attempt_start_time="2026-11-20T11:00:00Z")


@pytest.mark.parametrize(("suspend", "status", "workload", "flavors", "hold", "set_suspend", "reason", "extra"), [
    (True, TrainingJobStatus(), None, {}, True, None, Reason.QUEUED_IN_KUEUE, "create"),
    (True, TrainingJobStatus(), observed(), {}, True, None, Reason.QUEUED_IN_KUEUE, None),
    (False, TrainingJobStatus(), observed(), {}, True, True, Reason.QUEUED_IN_KUEUE, None),   # suspended by Kueue
    (True, TrainingJobStatus(), observed(admitted=True), {"zone-a": {"zone": "a"}}, True, False,
     Reason.ADMITTED_BY_KUEUE, None),                                                         # unsuspended
    (False, TrainingJobStatus(), observed(admitted=True), {"zone-a": {"zone": "a"}}, False, None,
     Reason.ADMITTED_BY_KUEUE, "selector"),
    (False, TrainingJobStatus(), observed(admitted=True), {}, False, None, Reason.ADMITTED_BY_KUEUE,
     "flavors pending"),
    (False, RAN, observed(evicted="Preempted"), {}, True, True, Reason.EVICTED_BY_KUEUE, "restart"),
    (True, TrainingJobStatus(), observed(count=3), {}, True, None, Reason.QUEUED_IN_KUEUE, "replace"),
])
def test_the_kueue_gate_holds_the_job_until_admitted(suspend, status, workload, flavors, hold, set_suspend, reason,
                                                      extra) -> None:
    gate, decided = kueue_gate(queued(suspend=suspend), status, workload, served=True, flavors=flavors, pods=[],
                               now=NOW)
    assert gate is not None and (gate.hold, gate.set_suspend) == (hold, set_suspend)
    assert [(c.type, c.reason) for c in decided.conditions] == [("KueueAdmitted", reason)]
    assert gate.create_workload == (extra == "create")
    assert gate.delete_workload == ("trainingjob-llama-abcde" if extra == "replace" else None)
    assert gate.node_selector == ({"zone": "a"} if flavors and workload.admitted else {})
    assert gate.flavors_pending == (extra == "flavors pending")
    history = decided.status.get("restart_history", [])
    assert [(r.reason, r.counted) for r in history] == ([(Reason.EVICTED_BY_KUEUE, False)] if extra == "restart"
                                                       else [])


def test_without_a_queue_or_without_kueue_there_is_no_gate() -> None:
    assert kueue_gate(stored_job(2), TrainingJobStatus(), None, served=True, flavors={}, pods=[], now=NOW) == (
        None, Decision())
    gate, decided = kueue_gate(queued(), TrainingJobStatus(), None, served=False, flavors={}, pods=[], now=NOW)
    assert gate is None and [c.reason for c in decided.conditions] == [Reason.KUEUE_NOT_INSTALLED]
