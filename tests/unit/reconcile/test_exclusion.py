"""Node exclusion (exclusion.py): the bounded, expiring list, and a failed health check through plan()."""

from __future__ import annotations

import pytest

from multinode.reconcile.exclusion import exclude_unhealthy_nodes
from datetime import timedelta

from multinode.api import Phase, TrainingJobStatus
from multinode.api.health_check import MAX_EXCLUDED_NODES, ExcludedNode, HealthStatus, NodeHealth
from multinode.reconcile.decision import Decision
from multinode.reconcile.exclusion import exclude_node, excluded_node_names, prune_expired
from tests.unit.reconcile.planning import NOW, pod, run
from multinode.testing import stored_job

BAD = NodeHealth(status=HealthStatus.FAILED, reason="GPUsNotVisible", message="8 GPUs requested, fewer visible: 7")
GOOD = NodeHealth(status=HealthStatus.PASSED, reason="Healthy", message="8 GPUs visible")


def test_an_excluded_node_stays_out_until_its_time() -> None:
    entry, excluded = exclude_node([], "gpu-1", "GPUsNotVisible", "7 of 8", now=NOW, seconds=600)
    status = TrainingJobStatus(excluded_nodes=excluded)

    assert entry.until == "2026-11-20T12:10:00Z" and excluded == [entry]
    assert excluded_node_names(status, NOW + timedelta(seconds=599)) == ["gpu-1"]
    assert excluded_node_names(status, NOW + timedelta(seconds=600)) == []
    assert prune_expired(status, NOW + timedelta(seconds=600)) == Decision(status={"excluded_nodes": []})
    assert status.excluded_nodes == [entry]  # asking changed nothing


def test_excluding_again_renews_the_entry_and_moves_it_last() -> None:
    _, excluded = exclude_node([], "gpu-1", "GPUsNotVisible", "first", now=NOW, seconds=600)
    _, excluded = exclude_node(excluded, "gpu-2", "ShmTooSmall", "x", now=NOW, seconds=600)
    _, excluded = exclude_node(excluded, "gpu-1", "MemlockTooLow", "second", now=NOW + timedelta(seconds=60),
                               seconds=60)

    assert [(e.node, e.reason, e.message) for e in excluded] == [
        ("gpu-2", "ShmTooSmall", "x"), ("gpu-1", "MemlockTooLow", "second")]
    # The later end wins: a short second exclusion does not shorten the first.
    assert excluded[-1].until == "2026-11-20T12:10:00Z"


def test_the_list_is_bounded_dropping_the_oldest() -> None:
    excluded: list[ExcludedNode] = []
    for i in range(MAX_EXCLUDED_NODES + 3):
        _, excluded = exclude_node(excluded, f"gpu-{i}", "GPUsNotVisible", "", now=NOW, seconds=600)
    assert len(excluded) == MAX_EXCLUDED_NODES
    assert excluded[0].node == "gpu-3"
    status = TrainingJobStatus(excluded_nodes=excluded)
    TrainingJobStatus.model_validate(status.model_dump(by_alias=True))  # still within the CRD's maxItems


def test_prune_keeps_the_unexpired() -> None:
    _, excluded = exclude_node([], "a", "R", "", now=NOW, seconds=60)
    _, excluded = exclude_node(excluded, "b", "R", "", now=NOW, seconds=120)
    pruned = prune_expired(TrainingJobStatus(excluded_nodes=excluded), NOW + timedelta(seconds=90))
    assert [e.node for e in pruned.status["excluded_nodes"]] == ["b"]


def _unhealthy_node_1(job):
    running = run(job, [pod(0, "Pending", health=GOOD), pod(1, "Pending", node="gpu-node-1")])
    failed = pod(1, "Failed", node="gpu-node-1", health=BAD, exit_code=1, reason="NodeUnhealthy",
                 message=f"{BAD.reason}: {BAD.message}")
    return run(job, [pod(0, "Pending", health=GOOD), failed], previous=running.status)


def test_a_failed_health_check_excludes_the_node_and_restarts_without_counting() -> None:
    job = stored_job(2, resourcesPerNode={"gpus": 8}, healthCheck={"exclusionSeconds": 1800})
    restarting = _unhealthy_node_1(job)
    status = restarting.status

    assert (status.phase, status.attempt, status.restarts, status.uncounted_restarts) == (Phase.RESTARTING, 1, 0, 1)
    [entry] = status.excluded_nodes
    assert (entry.node, entry.reason, entry.until) == ("gpu-node-1", "GPUsNotVisible", "2026-11-20T12:30:00Z")
    assert entry.message == BAD.message
    record = status.restart_history[-1]
    assert record.reason == "NodeUnhealthy" and not record.counted and "on gpu-node-1" in record.message
    # The node table keeps the failed node's verdict while the gang restarts, and only that.
    assert [(ns.index, ns.pod, ns.reason, ns.health) for ns in status.node_statuses] == [
        (1, "llama-1-a0", "NodeUnhealthy", BAD)]
    assert ("Warning", "NodeUnhealthy") in [(e.type, e.reason) for e in restarting.events]
    assert sorted(restarting.pods_to_delete) == ["llama-0-a0"]


def test_the_next_attempt_stays_off_the_excluded_node() -> None:
    job = stored_job(2, resourcesPerNode={"gpus": 8})
    restarting = _unhealthy_node_1(job)
    later = NOW + timedelta(minutes=5)  # past the backoff
    next_attempt = run(job, [], previous=restarting.status, now=later)

    assert len(next_attempt.pods_to_create) == 2
    for manifest in next_attempt.pods_to_create:
        terms = manifest["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [{"matchFields": [{"key": "metadata.name", "operator": "NotIn",
                                                                "values": ["gpu-node-1"]}]}]
    # Once the new pods show, their rows replace the old verdict.
    created = run(job, [pod(0, attempt=1, node="gpu-node-0", health=GOOD),
                        pod(1, attempt=1, node="gpu-node-2", health=GOOD)],
                  previous=next_attempt.status, now=later)
    # A passed verdict's row keeps no message (a 5000-node status must stay small).
    passed = NodeHealth(status=HealthStatus.PASSED, reason="Healthy")
    rows = [(ns.pod, ns.health) for ns in created.status.node_statuses]
    assert rows == [("llama-0-a1", passed), ("llama-1-a1", passed)]


def test_an_expired_exclusion_no_longer_shapes_new_pods() -> None:
    job = stored_job(2, resourcesPerNode={"gpus": 8}, healthCheck={"exclusionSeconds": 60})
    restarting = _unhealthy_node_1(job)
    next_attempt = run(job, [], previous=restarting.status, now=NOW + timedelta(minutes=5))
    assert all("nodeAffinity" not in manifest["spec"]["affinity"] for manifest in next_attempt.pods_to_create)
    assert next_attempt.status.excluded_nodes == []


def test_a_fail_job_rule_on_node_unhealthy_still_excludes_the_node() -> None:
    job = stored_job(2, failurePolicy={"rules": [{"action": "FailJob", "onReasons": ["NodeUnhealthy"]}]})
    failed = _unhealthy_node_1(job)
    assert failed.status.phase == Phase.FAILED
    assert [e.node for e in failed.status.excluded_nodes] == ["gpu-node-1"]


def test_two_unhealthy_pods_on_one_node_make_one_entry_and_one_event() -> None:
    job = stored_job(2, resourcesPerNode={"gpus": 4})
    running = run(job, [pod(0, "Pending"), pod(1, "Pending")])
    failed = [pod(i, "Failed", health=BAD, exit_code=1, reason="NodeUnhealthy") for i in (0, 1)]
    restarting = run(job, failed, previous=running.status)
    assert [e.node for e in restarting.status.excluded_nodes] == ["gpu-node-0"]
    assert [e.reason for e in restarting.events].count("NodeUnhealthy") == 1


@pytest.mark.parametrize(("pods", "excluded", "events"), [
    ([pod(0, "Failed", node="a", health=BAD), pod(1, "Failed", node="b", health=BAD)], ["a", "b"], 2),
    ([pod(0, "Failed", node="a", health=BAD), pod(1, "Failed", node="a", health=BAD)], ["a"], 1),  # one node
    ([pod(0, "Failed", node="a", health=GOOD), pod(1, "Failed", node=None, health=BAD)], [], 0),
])
def test_each_node_that_failed_its_health_check_is_excluded_once(pods, excluded, events) -> None:
    job = stored_job(2, healthCheck={"exclusionSeconds": 60})
    decided = exclude_unhealthy_nodes(job, TrainingJobStatus(), pods, NOW)
    assert [e.node for e in decided.status.get("excluded_nodes", [])] == excluded
    assert len(decided.events) == events
    assert all(e.until == "2026-11-20T12:01:00Z" for e in decided.status.get("excluded_nodes", []))
