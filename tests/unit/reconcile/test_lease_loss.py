"""A node whose lease stops renewing loses its rank to a warm spare (lease_loss.py), through the planner: at
once when the lease is older than half its duration and a spare waits; not while it is fresh, not without a
spare (the node's Ready condition decides then), never for a job without spares; and a trainer restarted in
place held until its peers' nodes show they live, with or without a spare, a stale lease then the node's
loss."""

from __future__ import annotations

from datetime import timedelta

from multinode.api.timestamps import rfc3339
from multinode.reconcile.lease_loss import LEASE_CHECK_SECONDS, NodeLease, observe_lease, stale_for
from multinode.testing import observed_spare, stored_job
from tests.unit.reconcile.planning import NOW, pod, run


def _job(spares=1):
    return stored_job(2, spareNodes=spares, failurePolicy={"restartStrategy": "InPlace"})


def _gang():
    return [pod(0, node="n0", in_place_attempt=0, restart_rules=True),
            pod(1, node="n1", in_place_attempt=0, restart_rules=True)]


def _renewed(seconds_ago: float) -> NodeLease:
    return NodeLease(rfc3339(NOW - timedelta(seconds=seconds_ago)), 40)


def test_a_stale_lease_with_a_warm_spare_loses_the_node_at_once() -> None:
    job = _job()
    spare = observed_spare(0, "n2")
    before = run(job, _gang(), spares=(spare,)).status
    lost = run(job, _gang(), previous=before, spares=(spare,),
               node_leases={"n0": _renewed(3), "n1": _renewed(21)})
    record = lost.status.restart_history[-1]
    assert (record.reason, record.index, record.counted, record.spare) == ("NodeLost", 1, False, 0)
    assert "has not renewed its lease for 21s" in record.message
    assert lost.pods_to_annotate["llama-s0"]["multinode.dev/node-index"] == "1"
    _force_deleted_at_once(lost, "llama-1-a0", "n1")
    assert [e.node for e in lost.status.excluded_nodes] == ["n1"], "the spare pool's refill stays off it too"


def test_a_fresh_lease_or_no_warm_spare_changes_nothing_but_the_job_looks_again() -> None:
    job = _job()
    before = run(job, _gang(), spares=(observed_spare(0, "n2"),)).status
    fresh = run(job, _gang(), previous=before, spares=(observed_spare(0, "n2"),),
                node_leases={"n0": _renewed(19), "n1": _renewed(1)})
    assert fresh.status.attempt == 0 and fresh.requeue_after is not None
    assert fresh.requeue_after <= LEASE_CHECK_SECONDS
    cold = run(job, _gang(), previous=before, spares=(observed_spare(0, None, in_preflight=False),),
               node_leases={"n1": _renewed(60)})
    assert cold.status.attempt == 0, "no warm spare: the node's Ready condition decides (node_loss.py)"
    assert cold.requeue_after is not None and cold.requeue_after <= LEASE_CHECK_SECONDS


def test_a_job_without_spares_never_reads_leases() -> None:
    job = stored_job(2, failurePolicy={"restartStrategy": "InPlace"})
    result = run(job, _gang(), node_leases={"n1": _renewed(60)})
    assert result.status.attempt == 0


def test_a_lease_read_from_the_apiserver() -> None:
    name, lease = observe_lease({"metadata": {"name": "n1"},
                                 "spec": {"renewTime": "2026-11-20T11:59:30.123456Z", "leaseDurationSeconds": 40}})
    assert name == "n1" and stale_for(lease, NOW) is not None and 29 < (stale_for(lease, NOW) or 0) < 31
    assert stale_for(NodeLease(None), NOW) is None, "a node still registering has no renewTime"


def _restarted(index, node, since):
    """A pod whose trainer restarted in place and waits at its preflight barrier since `since` (s before NOW)."""
    return pod(index, "Pending", node=node, in_place_attempt=0, restart_rules=True, trainer_restarts=1,
               in_preflight=True, preflight_started_at=rfc3339(NOW - timedelta(seconds=since)))


def test_a_rank_restarted_while_its_peers_node_says_nothing_waits_to_tell_a_crash_from_a_lost_node() -> None:
    job = _job()
    spare = observed_spare(0, "n2")
    before = run(job, _gang(), spares=(spare,)).status
    # Rank 1 restarted 3 s ago (its collectives failed); rank 0's node last renewed its lease 6 s ago.
    gang = [pod(0, node="n0", in_place_attempt=0, restart_rules=True), _restarted(1, "n1", since=3)]
    held = run(job, gang, previous=before, spares=(spare,), node_leases={"n0": _renewed(6), "n1": _renewed(1)})
    assert held.status.attempt == 0 and held.pods_to_annotate == {}, "no attempt declared yet"
    assert held.status.phase == "Restarting" and held.requeue_after is not None and held.requeue_after <= 1
    assert "waiting for node n0 (of pod llama-0-a0) to renew its lease" in condition_message(held.status)

    # The node renews: it lives, the rank crashed: the in-place attempt as usual (counted).
    alive = run(job, gang, previous=held.status, spares=(spare,), node_leases={"n0": _renewed(1), "n1": _renewed(1)})
    assert (alive.status.attempt, alive.status.restarts) == (1, 1)
    assert alive.status.restart_history[-1].reason == "PodFailed"

    # Or it never does: its node is lost, the spare takes rank 0, one attempt, not counted.
    dead = run(job, gang, previous=held.status, spares=(spare,), node_leases={"n0": _renewed(25), "n1": _renewed(1)})
    assert (dead.status.attempt, dead.status.restarts, dead.status.uncounted_restarts) == (1, 0, 1)
    record = dead.status.restart_history[-1]
    assert (record.reason, record.index, record.spare) == ("NodeLost", 0, 0)


def test_without_a_spare_a_restarted_rank_waits_too_and_a_stale_lease_gives_its_rank_to_a_new_pod() -> None:
    # Declared at once, rank 1's restarted agent would wait for the dead rank 0, and rank 0's replacement,
    # declared later as the attempt after, would never meet it (lease_loss.py).
    job = stored_job(2, failurePolicy={"restartStrategy": "InPlace"})
    gang = [pod(0, node="n0", in_place_attempt=0, restart_rules=True), _restarted(1, "n1", since=3)]
    before = run(job, _gang()).status
    held = run(job, gang, previous=before, node_leases={"n0": _renewed(6), "n1": _renewed(1)})
    assert held.status.attempt == 0 and held.pods_to_annotate == {}, "no attempt declared yet"
    assert "waiting for node n0 (of pod llama-0-a0) to renew its lease" in condition_message(held.status)

    alive = run(job, gang, previous=held.status, node_leases={"n0": _renewed(1), "n1": _renewed(1)})
    assert (alive.status.attempt, alive.status.restarts) == (1, 1), "a crash: the in-place attempt, counted"
    assert set(alive.pods_to_annotate) == {"llama-0-a0", "llama-1-a0"} and not list(alive.pods_to_create)

    dead = run(job, gang, previous=held.status, node_leases={"n0": _renewed(25), "n1": _renewed(1)})
    assert (dead.status.attempt, dead.status.restarts, dead.status.uncounted_restarts) == (1, 0, 1)
    record = dead.status.restart_history[-1]
    assert (record.reason, record.index, record.spare) == ("NodeLost", 0, None)
    assert "has not renewed its lease for 25s" in record.message and "a new pod takes its rank" in record.message
    assert set(dead.pods_to_annotate) == {"llama-1-a0"}, "the rank that restarted is told the attempt at once"
    _force_deleted_at_once(dead, "llama-0-a0", "n0")

    # The dead node reads Ready until its lease is 40 s old, free of its force-deleted pod: rank 0's new pod is
    # kept off it for one lease duration, past the NotReady (and the unreachable taint) to come.
    assert [(e.node, e.reason, e.until) for e in dead.status.excluded_nodes] == \
        [("n0", "NodeLost", rfc3339(NOW + timedelta(seconds=40)))]
    new = list(run(job, [gang[1]], previous=dead.status, node_leases={"n0": _renewed(26), "n1": _renewed(1)})
               .pods_to_create)
    assert [p["metadata"]["name"] for p in new] == ["llama-0-a1"]
    assert {"key": "metadata.name", "operator": "NotIn", "values": ["n0"]} in \
        new[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchFields"]


def _force_deleted_at_once(plan, name: str, node: str) -> None:
    """The lost pod goes without waiting for its kubelet, as on a NotReady node: a graceful deletion would wait
    for the node to turn NotReady (40 s on stock settings), and the job with it (WaitingForOldPods)."""
    assert plan.pods_to_force_delete == [name] and name not in plan.pods_to_delete
    forced = [e.message for e in plan.events if e.reason == "PodForceDeleted"]
    expected = (f"{name} of attempt 0 is on node {node}, which has stopped renewing its Lease: deleted without "
                "waiting for its kubelet")
    assert forced == [expected], forced


def test_a_peer_that_restarted_too_or_leases_not_readable_declare_at_once() -> None:
    job = stored_job(2, failurePolicy={"restartStrategy": "InPlace"})
    before = run(job, _gang()).status
    both = [_restarted(0, "n0", since=2), _restarted(1, "n1", since=3)]
    assert run(job, both, previous=before, node_leases={"n0": _renewed(6), "n1": _renewed(6)}).status.attempt == 1
    # No right to list Leases (controller/node_leases.py): nothing to wait for, as before the check.
    gang = [pod(0, node="n0", in_place_attempt=0, restart_rules=True), _restarted(1, "n1", since=3)]
    assert run(job, gang, previous=before).status.attempt == 1


def test_a_stale_lease_without_a_spare_or_a_restart_in_place_waits_for_the_node_condition() -> None:
    recreating = stored_job(2)  # BlockingRecreate: restarted pods never exist, the node's Ready condition decides
    assert run(recreating, _gang(), node_leases={"n1": _renewed(60)}).status.attempt == 0


def condition_message(status) -> str:
    return next(c.message for c in status.conditions if c.type == "Running")
