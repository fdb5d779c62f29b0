"""stragglers.action Exclude: a reported straggler's node is excluded and the gang restarts without it,
uncounted, unless the job would no longer fit or the slowness followed the rank from the last restart."""

from __future__ import annotations

from multinode.api.conditions import Reason
from multinode.api.progress import ProgressStatus
from multinode.reconcile.stragglers import straggler_failure
from datetime import timedelta

import pytest

from multinode.api import Phase, TrainingJobStatus
from multinode.api.status import RestartRecord
from multinode.reconcile.placement import ObservedNode, room_for
from multinode.reconcile.progress import JobProgress
from tests.unit.reconcile.planning import NOW, condition, run
from tests.unit.reconcile.test_stragglers import pods, timed
from multinode.testing import stored_job


def job(n: int = 3, gpus: int = 8, **spec):
    spec.setdefault("hangDetection", {"timeoutSeconds": 600, "stragglers": {"forSeconds": 0, "action": "Exclude"}})
    return stored_job(n, resourcesPerNode={"gpus": gpus}, **spec)


def nodes(count: int, gpus: int = 8, **labels: str) -> tuple[ObservedNode, ...]:
    return tuple(ObservedNode(name=f"n{i}", labels=dict(labels), allocatable={"nvidia.com/gpu": str(gpus)})
                 for i in range(count))


def slow_rank_2() -> JobProgress:
    return JobProgress(0, timed(1.0, 1.0, 4.0), NOW, NOW)


def test_the_straggler_node_is_excluded_and_the_gang_restarts_without_it_uncounted() -> None:
    j = job()
    result = run(j, pods(3), progress=slow_rank_2(), nodes=nodes(4))
    status = result.status
    [excluded] = status.excluded_nodes
    assert (excluded.node, excluded.reason, excluded.until) == ("n2", "Straggler", "2026-11-20T13:00:00Z")
    assert excluded.message.startswith("rank 2 on node n2: 4s a step, the median 1s, for over 0s")
    assert (status.phase, status.attempt, status.restarts, status.uncounted_restarts) == (Phase.RESTARTING, 1, 0, 1)
    [record] = status.restart_history
    assert (record.reason, record.counted, record.attempt) == ("Straggler", False, 0)
    assert record.message.startswith("rank 2 on node n2: ")
    assert sorted(result.pods_to_delete) == ["llama-0-a0", "llama-1-a0", "llama-2-a0"]
    assert [e.reason for e in result.events] == ["StragglersDetected", "Straggler", "Restarting"]
    assert "excluded until 2026-11-20T13:00:00Z" in result.events[1].message
    # The next attempt's pods stay off the node.
    later = run(j, [], previous=status, nodes=nodes(4), now=NOW + timedelta(seconds=30))
    assert len(later.pods_to_create) == 3
    for p in later.pods_to_create:
        terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchFields"] == [
            {"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]


def test_a_node_stays_when_the_job_would_not_fit_without_it() -> None:
    result = run(job(), pods(3), progress=slow_rank_2(), nodes=nodes(3))
    assert result.status.excluded_nodes == [] and result.status.attempt == 0 and result.pods_to_delete == []
    c = condition(result.status, "Stragglers")
    assert c.reason == "StragglersDetected"
    assert c.message.endswith("; not excluded: rank 2 on node n2 (without n2 the nodes left have room for 2 of "
                              "the job's 3 pods)"), c.message


def test_a_node_with_room_for_two_pods_counts_once() -> None:
    # One pod per node (render/pod.py's anti-affinity): two 8-GPU nodes host two of three 4-GPU pods, not four.
    result = run(job(gpus=4), pods(3), progress=slow_rank_2(), nodes=nodes(2))
    assert result.status.excluded_nodes == [] and result.status.attempt == 0


def test_without_the_node_list_no_node_is_excluded() -> None:
    result = run(job(), pods(3), progress=slow_rank_2())
    assert result.status.excluded_nodes == [] and result.status.phase != Phase.RESTARTING


def test_nodes_excluded_already_do_not_count_as_room() -> None:
    before = TrainingJobStatus.model_validate({"excludedNodes": [
        {"node": "n3", "reason": "GPUsNotVisible", "until": "2026-11-20T13:00:00Z"}]})
    result = run(job(), pods(3), previous=before, progress=slow_rank_2(), nodes=nodes(4))
    assert [e.node for e in result.status.excluded_nodes] == ["n3"] and result.status.attempt == 0


def test_the_rank_that_was_excluded_for_last_time_is_only_reported() -> None:
    """The last restart excluded rank 2's node; rank 2 is slow again elsewhere: the rank is the cause."""
    record = RestartRecord(attempt=0, reason="Straggler", message="rank 2 on node n9: 4s a step, ...", counted=False,
                           time="2026-11-20T11:50:00Z")
    before = TrainingJobStatus(attempt=1, uncounted_restarts=1, restart_history=[record])
    progress = JobProgress(1, timed(1.0, 1.0, 4.0), NOW, NOW)
    result = run(job(), pods_of_attempt(1), previous=before, progress=progress, nodes=nodes(4))
    assert result.status.attempt == 1 and result.status.excluded_nodes == []
    assert "not excluded: rank 2 on node n2 (it was the straggler the last restart excluded a node for" in condition(
        result.status, "Stragglers").message
    # Another rank slow after that restart: its node goes.
    other = JobProgress(1, timed(1.0, 4.0, 1.0), NOW, NOW)
    again = run(job(), pods_of_attempt(1), previous=before, progress=other, nodes=nodes(4))
    assert [e.node for e in again.status.excluded_nodes] == ["n1"] and again.status.attempt == 2


def pods_of_attempt(attempt: int):
    return [p.__class__(**{**p.__dict__, "attempt": attempt, "name": f"llama-{p.index}-a{attempt}"}) for p in pods(3)]


def test_report_never_excludes() -> None:
    j = job(hangDetection={"timeoutSeconds": 600, "stragglers": {"forSeconds": 0, "action": "Report"}})
    result = run(j, pods(3), progress=slow_rank_2(), nodes=nodes(4))
    assert result.status.excluded_nodes == [] and condition(result.status, "Stragglers").status == "True"
    assert "not excluded" not in condition(result.status, "Stragglers").message


def test_an_unconfirmed_straggler_is_not_excluded_yet() -> None:
    j = job(hangDetection={"timeoutSeconds": 600, "stragglers": {"forSeconds": 60, "action": "Exclude"}})
    result = run(j, pods(3), progress=slow_rank_2(), nodes=nodes(4))
    assert result.status.excluded_nodes == [] and result.requeue_after == 60


@pytest.mark.parametrize("action, phase, restarts", [("FailJob", Phase.FAILED, 0), ("Restart", Phase.RESTARTING, 1)])
def test_a_failure_policy_rule_decides_a_straggler_restart(action: str, phase: Phase, restarts: int) -> None:
    j = job(failurePolicy={"maxRestarts": 3, "rules": [{"action": action, "onReasons": ["Straggler"]}]})
    result = run(j, pods(3), progress=slow_rank_2(), nodes=nodes(4))
    assert (result.status.phase, result.status.restarts) == (phase, restarts)
    assert [e.node for e in result.status.excluded_nodes] == ["n2"]


def test_room_with_topology_is_the_roomiest_domain() -> None:
    j = stored_job(2, resourcesPerNode={"gpus": 8}, topology={"sameDomainLabel": "block"})
    block = (ObservedNode("a0", {"block": "a"}, allocatable={"nvidia.com/gpu": "8"}),
             ObservedNode("a1", {"block": "a"}, allocatable={"nvidia.com/gpu": "8"}),
             ObservedNode("b0", {"block": "b"}, allocatable={"nvidia.com/gpu": "16"}),
             ObservedNode("c0", {}, allocatable={"nvidia.com/gpu": "8"}))
    assert room_for(j, block, set()) == 2  # b0's 16 GPUs still host one pod: one pod per node
    assert room_for(j, block, {"a0", "b0"}) == 1
    assert room_for(j, (*block[:3], ObservedNode("a2", {"block": "a"}, ready=False)), {"a0"}) == 1


# The policy called directly.

EXPIRED = {"node": "n9", "reason": "GPUsNotVisible", "until": "2026-11-20T11:00:00Z"}
REPORTED = {"attempt": 0, "medianStepSeconds": 1.0, "stragglers": [
    {"index": 2, "node": "n2", "stepSeconds": 4.0, "reported": True}]}
STRAGGLING = [{"type": "Stragglers", "status": "True", "reason": "StragglersDetected", "message": "rank 2 slow",
               "lastTransitionTime": "2026-11-20T11:59:00Z"}]


@pytest.mark.parametrize(("action", "cluster", "excluded", "failed", "message_end"), [
    ("Exclude", nodes(4), ["n2"], True, None),                      # the node goes, the attempt fails
    ("Exclude", nodes(3), [], False, "(without n2 the nodes left have room for 2 of the job's 3 pods)"),
    ("Exclude", (), [], False, "(without n2 the nodes left have room for 0 of the job's 3 pods)"),
    ("Report", nodes(4), None, False, None),                        # only reported: not this policy's
])
def test_a_reported_stragglers_node_is_excluded_if_the_job_still_fits(action, cluster, excluded, failed,
                                                                      message_end) -> None:
    j = job(hangDetection={"timeoutSeconds": 600, "stragglers": {"forSeconds": 0, "action": action}})
    status = TrainingJobStatus(progress=ProgressStatus.model_validate(REPORTED), excluded_nodes=[EXPIRED],
                               conditions=STRAGGLING)
    decided = straggler_failure(j, status, cluster, NOW)
    # Expired entries go either way (action Exclude); the straggler's node is added when it may go.
    assert [e.node for e in decided.status.get("excluded_nodes", status.excluded_nodes)] == (
        excluded if excluded is not None else ["n9"])
    assert (decided.failure is not None) == failed
    if failed:
        assert (decided.failure.reason, decided.failure.straggler) == (Reason.STRAGGLER, True)
        assert [e.reason for e in decided.events] == [Reason.STRAGGLER]
    kept = [c.message for c in decided.conditions]
    assert kept == ([f"rank 2 slow; not excluded: rank 2 on node n2 {message_end}"] if message_end else [])
