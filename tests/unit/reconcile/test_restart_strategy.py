"""reconcile/restart_strategy.py: failurePolicy.restartStrategy unset is InPlace where every node that could
host the job declares the kubelet's feature, else BlockingRecreate; chosen once, kept in status."""

from __future__ import annotations

import pytest

from multinode.api import TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.constants import LABEL_GPU_PRODUCT
from multinode.api.lifecycle import RestartStrategy
from multinode.reconcile.placement import ObservedNode
from multinode.reconcile.restart_strategy import choose_restart_strategy, with_restart_strategy
from multinode.render.in_place import IN_PLACE_NODE_FEATURE
from multinode.testing import stored_job
from tests.unit.reconcile.planning import condition, run

IN_PLACE, BLOCKING = RestartStrategy.IN_PLACE, RestartStrategy.BLOCKING_RECREATE
FEATURE = frozenset({IN_PLACE_NODE_FEATURE})
H100 = {LABEL_GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3"}


def node(name: str, *, declares: bool = True, ready: bool = True, schedulable: bool = True,
         labels: dict[str, str] | None = None) -> ObservedNode:
    return ObservedNode(name, labels=labels or {}, ready=ready, schedulable=schedulable,
                        declared_features=FEATURE if declares else frozenset())


@pytest.mark.parametrize(("spec", "nodes", "chosen", "ruled_out_by"), [
    # Every node serves it: in place.
    ({}, [node("a"), node("b")], IN_PLACE, None),
    # One Ready node that could host a pod lacks it: its pods would be kept off that node, so recreate.
    ({}, [node("a"), node("old", declares=False)], BLOCKING, "old"),
    # Nodes that cannot host the job do not count: NotReady, cordoned, another GPU product.
    ({}, [node("a"), node("down", declares=False, ready=False)], IN_PLACE, None),
    ({}, [node("a"), node("cordoned", declares=False, schedulable=False)], IN_PLACE, None),
    ({"accelerator": H100[LABEL_GPU_PRODUCT]},
     [node("h100", labels=H100), node("cpu-old", declares=False)], IN_PLACE, None),
    ({"podTemplate": {"nodeSelector": {"pool": "train"}}},
     [node("t", labels={"pool": "train"}, declares=False), node("other")], BLOCKING, "t"),
    # None fits yet (a pool still scaling up): every Ready node is asked.
    ({"accelerator": H100[LABEL_GPU_PRODUCT]}, [node("a"), node("old", declares=False)], BLOCKING, "old"),
    ({"accelerator": H100[LABEL_GPU_PRODUCT]}, [node("a"), node("b")], IN_PLACE, None),
    # No Ready node at all: nothing says the cluster serves it.
    ({}, [], BLOCKING, "no node is Ready"),
    ({}, [node("down", ready=False)], BLOCKING, "no node is Ready"),
    # The job's own shape decides first, whatever the nodes.
    ({"elastic": {"minNodes": 1}}, [node("a"), node("b")], BLOCKING, None),
    ({"spareNodes": 1}, [node("a"), node("old", declares=False)], IN_PLACE, None),
])
def test_an_unset_strategy_is_chosen_from_the_nodes_that_could_host_the_job(spec, nodes, chosen, ruled_out_by):
    decision = choose_restart_strategy(stored_job(2, **spec), TrainingJobStatus(), nodes)
    assert decision.status == {"restart_strategy": chosen}
    if ruled_out_by is None:
        assert decision.conditions == ()
        return
    (said,) = decision.conditions
    assert (said.type, said.status, said.reason) == ("InPlaceRestarts", "False", Reason.NODES_LACK_IN_PLACE_RESTARTS)
    assert ruled_out_by in said.message and "BlockingRecreate" in said.message


def test_the_choice_is_kept_and_a_spec_that_names_one_wins() -> None:
    declaring = [node("a")]
    kept = TrainingJobStatus(restart_strategy=BLOCKING)
    assert choose_restart_strategy(stored_job(2), kept, declaring).status == {}
    named = stored_job(2, failurePolicy={"restartStrategy": "Recreate"})
    assert choose_restart_strategy(named, kept, declaring).status == {"restart_strategy": RestartStrategy.RECREATE}
    assert choose_restart_strategy(named, TrainingJobStatus(restart_strategy=RestartStrategy.RECREATE),
                                   declaring).status == {}
    # A job that made pods before strategies were chosen (an operator rolled back, then forward) keeps the
    # recreate its pods were made for.
    started = TrainingJobStatus(start_time="2026-11-20T11:00:00Z")
    assert choose_restart_strategy(stored_job(2), started, declaring).status == {"restart_strategy": BLOCKING}


def test_the_job_as_it_runs_reads_the_chosen_strategy_from_its_spec() -> None:
    job = stored_job(2)
    assert job.spec.failure_policy.restart_strategy is None
    assert with_restart_strategy(job, None) is job
    running = with_restart_strategy(job, TrainingJobStatus(restart_strategy=IN_PLACE))
    assert running.spec.failure_policy.restart_strategy == IN_PLACE
    assert job.spec.failure_policy.restart_strategy is None, "the stored job is not changed"
    named = stored_job(2, failurePolicy={"restartStrategy": "Recreate"})
    assert with_restart_strategy(named, TrainingJobStatus(restart_strategy=IN_PLACE)) is named


def test_the_first_pass_chooses_and_creates_the_pods_for_the_choice() -> None:
    first = run(stored_job(2), [], nodes=(node("a"), node("b")))
    assert first.status.restart_strategy == IN_PLACE
    assert [len(p["spec"]["containers"][0].get("restartPolicyRules") or []) for p in first.pods_to_create] == [1, 1]
    old = run(stored_job(2), [], nodes=(node("a"), node("old", declares=False)))
    assert old.status.restart_strategy == BLOCKING
    assert [p["spec"]["containers"][0].get("restartPolicyRules") for p in old.pods_to_create] == [None, None]
    assert condition(old.status, "InPlaceRestarts").reason == Reason.NODES_LACK_IN_PLACE_RESTARTS
