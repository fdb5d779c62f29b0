"""How a verdict shows in the status (status_report.py): condition transitions and a failed job's status."""

from __future__ import annotations

import pytest

from multinode.api import TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.reconcile.decision import Decision
from multinode.reconcile.outcome import Event, Verdict
from multinode.reconcile.status_report import node_table, phase_change, verdict_conditions
from datetime import timedelta

from multinode.api import Phase
from multinode.api.status import MAX_CONDITION_MESSAGE, MAX_NODE_STATUSES
from multinode.reconcile.status_report import fail_job
from tests.unit.reconcile.planning import NOW, condition, pod, run
from multinode.testing import stored_job


def test_last_transition_time_moves_only_when_the_status_flips() -> None:
    job = stored_job(2)
    first = run(job, [pod(0, "Pending", node=None), pod(1, "Pending", node=None)])
    later = run(job, [pod(0, "Pending"), pod(1, "Running")], previous=first.status, now=NOW + timedelta(seconds=30))

    before, after = condition(first.status, "Running"), condition(later.status, "Running")
    assert before.message != after.message
    assert after.last_transition_time == before.last_transition_time == "2026-11-20T12:00:00Z"


def test_fail_job_keeps_nothing_running_and_says_why() -> None:
    result = run(stored_job(2), [pod(0)])

    failed = fail_job(result, "PodCreationFailed", "spec.volumes[0]: Invalid value", now=NOW, pods=[pod(0)])

    assert failed.pods_to_create == [] and failed.pods_to_delete == ["llama-0-a0"]
    assert failed.status.phase == Phase.FAILED
    assert condition(failed.status, "Failed").message == "spec.volumes[0]: Invalid value"


def test_fail_job_with_a_message_too_long_for_a_condition_keeps_its_start() -> None:
    # The apiserver echoes invalid values: a 70,000-character pod label key makes a 70,000-character refusal.
    refusal = 'Pod "llama-0-a0" is invalid: metadata.labels: Invalid value: "' + "b" * 70_000 + '"'
    failed = fail_job(run(stored_job(2), []), "PodCreationFailed", refusal, now=NOW, pods=[])

    message = condition(failed.status, "Failed").message
    assert len(message) == MAX_CONDITION_MESSAGE and message.endswith("(truncated)")
    assert message.startswith('Pod "llama-0-a0" is invalid: metadata.labels: Invalid value: "bbb')


# ---- the compact node table: nodeCounts counts every node, nodeStatuses lists at most MAX_NODE_STATUSES ----

def test_a_job_that_fits_lists_every_node_in_index_order() -> None:
    job = stored_job(3)
    result = run(job, [pod(0), pod(2, "Pending", waiting_reason="ErrImagePull")])

    assert [ns.index for ns in result.status.node_statuses] == [0, 1, 2]
    assert result.status.node_statuses_omitted == 0
    counts = result.status.node_counts
    assert (counts.running, counts.pending, counts.no_pod, counts.not_fine) == (1, 1, 1, 2)


def test_a_big_job_lists_the_troubled_nodes_first_then_waiting_then_fine_in_index_order() -> None:
    n = 3 * MAX_NODE_STATUSES
    pods = [pod(i) for i in range(n)]
    pods[250] = pod(250, "Running", reason="Stalled")
    pods[7] = pod(7, "Pending", waiting_reason="ImagePullBackOff")
    pods[120] = pod(120, "Pending")
    result = run(stored_job(n), pods)

    listed = [ns.index for ns in result.status.node_statuses]
    assert len(listed) == MAX_NODE_STATUSES and listed == sorted(listed)
    assert {7, 120, 250} <= set(listed) and listed[:4] == [0, 1, 2, 3], "fine ones fill the room left, lowest first"
    assert result.status.node_statuses_omitted == n - MAX_NODE_STATUSES
    counts = result.status.node_counts
    assert (counts.running, counts.pending, counts.no_pod, counts.not_fine) == (n - 2, 2, 0, 3)


def test_a_big_job_with_more_nodes_not_fine_than_rows_lists_the_troubled_before_the_waiting() -> None:
    n = 3 * MAX_NODE_STATUSES
    pods = [pod(i, "Pending", node=None) for i in range(n - 1)] + [pod(n - 1, "Pending", waiting_reason="ErrImagePull")]
    result = run(stored_job(n), pods, previous=run(stored_job(n), []).status)

    listed = [ns.index for ns in result.status.node_statuses]
    assert n - 1 in listed and len(listed) == MAX_NODE_STATUSES


def test_an_unlisted_pod_of_a_big_running_gang_that_vanishes_restarts_the_gang_as_node_lost() -> None:
    n = 2 * MAX_NODE_STATUSES
    job = stored_job(n)
    running = run(job, [pod(i) for i in range(n)])
    assert 150 not in {ns.index for ns in running.status.node_statuses}

    lost = run(job, [pod(i) for i in range(n) if i != 150], previous=running.status)

    assert lost.status.restart_history[-1].reason == "NodeLost"
    assert "llama-150-a0 of node 150" in lost.status.restart_history[-1].message
    assert lost.pods_to_create == [], "never one pod recreated alone"


def test_a_huge_job_plans_a_stream_of_pods_and_a_status_of_bounded_size() -> None:
    import json

    from multinode.controller.status_patch import dump_status
    from multinode.reconcile.outcome import PodStream

    n = 20_000
    job = stored_job(n)
    first = run(job, [])
    assert isinstance(first.pods_to_create, PodStream) and len(first.pods_to_create) == n
    assert first.pods_to_create.names[-1] == f"llama-{n - 1}-a0"
    assert first.pods_to_create[n - 1]["metadata"]["name"] == f"llama-{n - 1}-a0"

    running = run(job, [pod(i) for i in range(n)], previous=first.status)
    assert running.status.ready == f"{n}/{n}" and running.status.node_counts.running == n
    assert len(json.dumps(dump_status(running.status))) < 20_000


# The report called directly.

@pytest.mark.parametrize(("verdict", "created", "suspended_before", "conditions"), [
    (Verdict(Phase.PENDING, Reason.CREATING_PODS, "1/2"), 1, False,
     [("Created", "False", Reason.CREATING_PODS), ("Running", "False", Reason.CREATING_PODS)]),
    (Verdict(Phase.RUNNING, Reason.ALL_NODES_RUNNING, "all"), 2, True,
     [("Created", "True", Reason.PODS_CREATED), ("Running", "True", Reason.ALL_NODES_RUNNING),
      ("Suspended", "False", Reason.RESUMED)]),
    (Verdict(Phase.SUCCEEDED, Reason.ALL_NODES_SUCCEEDED, "done"), 0, False,
     [("Created", "True", Reason.PODS_CREATED), ("Running", "False", Reason.JOB_FINISHED),
      ("Succeeded", "True", Reason.ALL_NODES_SUCCEEDED)]),
    (Verdict(Phase.FAILED, Reason.DEADLINE_EXCEEDED, "late"), 2, False,
     [("Created", "True", Reason.PODS_CREATED), ("Running", "False", Reason.JOB_FINISHED),
      ("Failed", "True", Reason.DEADLINE_EXCEEDED)]),
])
def test_a_verdict_shows_in_the_conditions(verdict, created, suspended_before, conditions) -> None:
    before = [{"type": "Suspended", "status": "True", "reason": "Suspended", "message": "m",
               "lastTransitionTime": "2026-11-20T11:00:00Z"}] if suspended_before else []
    status = TrainingJobStatus.model_validate({"conditions": before})
    assert [(c.type, c.status, c.reason) for c in verdict_conditions(status, verdict, created=created,
                                                                     num_nodes=2)] == conditions


@pytest.mark.parametrize(("was", "verdict", "decided"), [
    (Phase.PENDING, Verdict(Phase.PENDING, "A", "a"), Decision()),
    (Phase.PENDING, Verdict(Phase.RUNNING, "B", "b"), Decision(status={"phase": Phase.RUNNING},
                                                               events=(Event("Normal", "B", "b"),))),
    (Phase.RUNNING, Verdict(Phase.FAILED, "C", "c"), Decision(status={"phase": Phase.FAILED},
                                                              events=(Event("Warning", "C", "c"),))),
])
def test_a_phase_change_is_set_with_its_event(was, verdict, decided) -> None:
    assert phase_change(TrainingJobStatus(phase=was), verdict) == decided


def test_the_node_table_is_a_set_of_status_fields_and_reads_the_last_rows() -> None:
    vanished = TrainingJobStatus.model_validate({"nodeStatuses": [
        {"index": 1, "pod": "llama-1-a0", "phase": "Running"}]})
    table = node_table(vanished, {0: pod(0)}, 2)
    assert set(table) == {"node_statuses", "node_statuses_omitted", "node_counts", "ready_nodes", "ready"}
    assert [(ns.index, ns.pod) for ns in table["node_statuses"]] == [(0, "llama-0-a0"), (1, "llama-1-a0")]
    assert (table["ready"], table["node_counts"].no_pod, table["node_counts"].not_fine) == ("1/2", 1, 1)
