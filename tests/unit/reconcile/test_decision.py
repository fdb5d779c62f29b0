"""The Decision (decision.py): what folding one does to a Plan, combining two, and that no policy changes what it
is given (each is called with built inputs, which compare equal to copies taken before the call)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from multinode.api import Phase, TrainingJobStatus
from multinode.api.health_check import HealthStatus, NodeHealth
from multinode.api.status import SchedulingStatus
from multinode.reconcile.in_place import abandon, declare, in_place_failure, in_place_verdict, rules_kept
from multinode.reconcile import lifecycle
from multinode.reconcile.attempt_failures import attempt_failure
from multinode.reconcile.checkpointing import mirror_on_lost_node, report_mirror
from multinode.reconcile.decision import Decision, SetCondition, fold
from multinode.reconcile.exclusion import exclude_unhealthy_nodes, prune_expired
from multinode.reconcile.failures import Failure
from multinode.reconcile.final_sync import hold_for_final_sync
from multinode.reconcile.gang import gang_verdict
from multinode.reconcile.gang_fallback import release_partial_gang, wait_before_retry
from multinode.reconcile.goodput import account
from multinode.reconcile.hang import judge_hang
from multinode.reconcile.image_consistency import judge_digests
from multinode.integrations.kueue import kueue_gate
from multinode.render import RenderSettings
from multinode.testing import seen_integrations
from multinode.reconcile.node_loss import NodeDown, force_delete_stranded, judge_down_nodes
from multinode.reconcile.observed import Observed
from multinode.reconcile.outcome import Event, Plan, Verdict
from multinode.reconcile.placement import ObservedNode, attempt_node_selector
from multinode.reconcile.progress import JobProgress, RankProgress, report_progress
from multinode.reconcile.restarts import apply_failure_policy, wait_for_next_attempt
from multinode.reconcile.startup import note_first_bound, startup_timeout
from multinode.reconcile.status_report import node_table, phase_change, verdict_conditions
from multinode.reconcile.stragglers import judge_stragglers, straggler_failure
from multinode.testing import checkpointed_job, observed_mirror, observed_pod, stored_job
from tests.unit.reconcile.planning import NOW


def test_folding_sets_fields_and_conditions_and_adds_the_actions() -> None:
    result = Plan(status=TrainingJobStatus(attempt=1), pods_to_delete=["a", "b"])
    fold(result, Decision(status={"attempt": 2}, conditions=(SetCondition("Running", "False", "Backoff", "wait"),),
                          delete=("b", "c"), force_delete=("a",), events=(Event("Normal", "R", "m"),),
                          requeue_after=30.0, objects_to_create=({"kind": "PodGroup"},)),
         now=NOW, generation=3)
    fold(result, Decision(requeue_after=60.0, delete_job=False), now=NOW, generation=3)

    assert result.status.attempt == 2
    [running] = result.status.conditions
    assert (running.type, running.status, running.reason, running.observed_generation) == ("Running", "False",
                                                                                         "Backoff", 3)
    # Force-deleted pods leave the graceful deletions; the sooner timer wins.
    assert result.pods_to_delete == ["b", "c"] and result.pods_to_force_delete == ["a"]
    assert result.requeue_after == 30.0 and result.events == [Event("Normal", "R", "m")]
    assert result.objects_to_create == [{"kind": "PodGroup"}] and not result.delete_job


def test_annotations_merge_by_pod_and_the_later_wins() -> None:
    result = Plan()
    fold(result, Decision(annotate=(("p", {"a": "1", "b": "1"}),)), now=NOW, generation=None)
    fold(result, Decision(annotate=(("p", {"b": "2"}), ("q", {"a": "3"}))), now=NOW, generation=None)
    assert result.pods_to_annotate == {"p": {"a": "1", "b": "2"}, "q": {"a": "3"}}


def test_stop_creating_empties_the_pods_to_create() -> None:
    result = Plan(pods_to_create=[{"metadata": {"name": "p"}}])
    fold(result, Decision(stop_creating=True), now=NOW, generation=None)
    assert result.pods_to_create == []


def test_a_decision_names_only_fields_of_the_status_and_cannot_be_changed() -> None:
    with pytest.raises(ValueError, match="not fields of TrainingJobStatus: \\['attempts'\\]"):
        Decision(status={"attempts": 1})
    decided = Decision(status={"attempt": 1})
    with pytest.raises(TypeError):
        decided.status["attempt"] = 2  # type: ignore[index]


@pytest.mark.parametrize(("first", "later", "combined"), [
    (Decision(), Decision(), Decision()),
    (Decision(status={"attempt": 1}, requeue_after=9.0), Decision(status={"attempt": 2, "restarts": 1},
                                                                   requeue_after=5.0),
     Decision(status={"attempt": 2, "restarts": 1}, requeue_after=5.0)),
    (Decision(failure=Failure("PodFailed", "x"), delete=("a",)), Decision(delete=("b",), stop_creating=True),
     Decision(failure=Failure("PodFailed", "x"), delete=("a", "b"), stop_creating=True)),
    (Decision(verdict=Verdict(Phase.PENDING, "A", "a")), Decision(verdict=Verdict(Phase.RUNNING, "B", "b")),
     Decision(verdict=Verdict(Phase.RUNNING, "B", "b"))),
])
def test_then_keeps_both_and_the_later_wins(first: Decision, later: Decision, combined: Decision) -> None:
    assert first.then(later) == combined


JOB = stored_job(2, hangDetection={"timeoutSeconds": 60, "stragglers": {"action": "Exclude"}})
JOB.metadata.labels = {"kueue.x-k8s.io/queue-name": "q"}
BAD = NodeHealth(status=HealthStatus.FAILED, reason="GPUsNotVisible", message="7")
STATUS = TrainingJobStatus(
    phase=Phase.RESTARTING, attempt=1, start_time="2026-11-20T11:00:00Z", attempt_start_time="2026-11-20T11:00:00Z",
    attempt_scheduled_time="2026-11-20T11:00:00Z", next_attempt_time="2026-11-20T13:00:00Z",
    scheduling=SchedulingStatus(gang="None", partial_since="2026-11-20T11:00:00Z",
                                next_try_time="2026-11-20T11:30:00Z"),
    excluded_nodes=[{"node": "old", "reason": "R", "until": "2026-11-20T11:00:00Z"}],
    progress={"attempt": 1, "stragglers": [{"index": 1, "node": "n1", "since": "2026-11-20T11:00:00Z",
                                            "reported": True, "stepSeconds": 9.0}]})
PODS = {0: observed_pod(0, attempt=1, node="n0", started_at="2026-11-20T11:00:00Z", image_id="r/i@sha256:aa"),
        1: observed_pod(1, "Failed", attempt=1, node="n1", health=BAD, exit_code=1, image_id="r/i@sha256:bb")}
DOWN = {"n0": NodeDown("False", "2026-11-20T11:00:00Z"), "n1": NodeDown("Unknown")}
PROGRESS = JobProgress(1, (RankProgress(0, "n0", 5, NOW - timedelta(hours=1), step_seconds=1.0),
                           RankProgress(1, "n1", 5, NOW - timedelta(hours=1), step_seconds=9.0)), None, checked=NOW)

TOPOLOGY = stored_job(2, topology={"sameDomainLabel": "block"})
IN_PLACE = stored_job(2, failurePolicy={"restartStrategy": "InPlace"})
NODES = tuple(ObservedNode(name=f"b{i}", labels={"block": "b"}) for i in range(2))

# Every policy, called with the shared inputs above (and a failure where it takes one).
POLICIES: dict[str, Callable[[TrainingJobStatus, dict[int, Any]], Any]] = {
    "suspend": lambda s, c: lifecycle.suspend(JOB, s, c),
    "resume": lambda s, c: lifecycle.resume(s, c),
    "deadline": lambda s, c: lifecycle.deadline(JOB, s, NOW),
    "clean_up_finished": lambda s, c: lifecycle.clean_up_finished(JOB, s, list(c.values()), None, NOW),
    "apply_failure_policy": lambda s, c: apply_failure_policy(JOB, s, Failure("PodFailed", "x"), c, NOW),
    "wait_for_next_attempt": lambda s, c: wait_for_next_attempt(JOB, s, list(c.values()), NOW),
    "wait_before_retry": lambda s, c: wait_before_retry(JOB, s, list(c.values()), NOW),
    "release_partial_gang": lambda s, c: release_partial_gang(JOB, s, c, NOW),
    "gang_verdict": lambda s, c: gang_verdict(JOB, s, c, None, Verdict(Phase.PENDING, "Unschedulable", "x")),
    "hold_for_final_sync": lambda s, c: hold_for_final_sync(checkpointed_job(), s, s, NOW, c.values()),
    "exclude_unhealthy_nodes": lambda s, c: exclude_unhealthy_nodes(JOB, s, c.values(), NOW),
    "prune_expired": lambda s, c: prune_expired(s, NOW),
    "judge_stragglers": lambda s, c: judge_stragglers(JOB, s, PROGRESS, set(c), NOW),
    "straggler_failure": lambda s, c: straggler_failure(JOB, s, (), NOW),
    "note_first_bound": lambda s, c: note_first_bound(s, c, NOW),
    "startup_timeout": lambda s, c: startup_timeout(JOB, s, c, NOW, why_not_running=lambda: "x"),
    "judge_hang": lambda s, c: judge_hang(JOB, s, c, PROGRESS, NOW),
    "judge_digests": lambda s, c: judge_digests(JOB, s, c),
    "judge_down_nodes": lambda s, c: judge_down_nodes(JOB, c.values(), DOWN, NOW),
    "force_delete_stranded": lambda s, c: force_delete_stranded(c.values(), DOWN, deleting={"llama-0-a1"}),
    "report_mirror": lambda s, c: report_mirror(checkpointed_job(), observed_mirror()),
    "mirror_on_lost_node": lambda s, c: mirror_on_lost_node(checkpointed_job(), observed_mirror(), DOWN, NOW),
    "report_progress": lambda s, c: report_progress(JOB, s, PROGRESS, set(c)),
    "kueue_gate": lambda s, c: kueue_gate(JOB, s, None, served=True, flavors={}, pods=c.values(), now=NOW),
    "account": lambda s, c: account(TrainingJobStatus(), s, NOW),
    "attempt_failure": lambda s, c: attempt_failure(JOB, s, s, c, Observed(pods=tuple(c.values())), NOW),
    "attempt_node_selector": lambda s, c: attempt_node_selector(TOPOLOGY, s, NODES),
    "node_table": lambda s, c: node_table(s, c, 2),
    "verdict_conditions": lambda s, c: verdict_conditions(s, Verdict(Phase.FAILED, "R", "m"), created=2, num_nodes=2),
    "phase_change": lambda s, c: phase_change(s, Verdict(Phase.FAILED, "R", "m")),
    "in_place_failure": lambda s, c: in_place_failure(s, c),
    "in_place_restart": lambda s, c: apply_failure_policy(IN_PLACE, s, Failure("PodFailed", "x", in_place=True), c,
                                                          NOW),
    "declare": lambda s, c: declare(IN_PLACE, s.model_copy(update={"pods_attempt": 0}), c),
    "abandon": lambda s, c: abandon(IN_PLACE, s.model_copy(update={"pods_attempt": 0}), c, NOW),
    "in_place_verdict": lambda s, c: in_place_verdict(s, c, 2),
    "rules_kept": lambda s, c: rules_kept(IN_PLACE, c),
}
# And every integration's extension points (reconcile/integration.py), each served, for a job queued in Kueue.
# A job each integration has a say over: queued in Kueue, naming Volcano or coscheduling.
QUEUED = stored_job(2)
QUEUED.metadata.labels = {"kueue.x-k8s.io/queue-name": "q"}
NAMING = {"volcano": stored_job(2, scheduling={"volcano": {}}),
          "coscheduling": stored_job(2, scheduling={"coscheduling": {"schedulerName": "scheduler-plugins"}})}
for _seen in seen_integrations(gang_api=True, kueue_api=True):
    _i, _job = _seen.integration, NAMING.get(_seen.integration.name, QUEUED)
    POLICIES.update({
        f"{_i.name}.gate": lambda s, c, i=_i, j=_job, seen=_seen: i.gate(j, s, seen, tuple(c.values()), NOW,
                                                                         RenderSettings()),
        f"{_i.name}.attempt_objects": lambda s, c, i=_i, j=_job, seen=_seen: i.attempt_objects(j, s, seen),
        f"{_i.name}.live_objects": lambda s, c, i=_i, j=_job, seen=_seen: i.live_objects(j, s, seen),
        f"{_i.name}.finish": lambda s, c, i=_i, j=_job, seen=_seen: i.finish(j, s, seen, NOW),
        f"{_i.name}.wants_gang": lambda s, c, i=_i, j=_job, seen=_seen: i.wants_gang(j, seen, c),
    })


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_no_policy_changes_what_it_is_given(name: str) -> None:
    status, current = STATUS.model_copy(deep=True), dict(PODS)
    status_before, current_before = status.model_copy(deep=True), copy.deepcopy(current)
    POLICIES[name](status, current)
    assert status == status_before and current == current_before
