"""What the reconciler tells the planner about one job (controller/observe.py), read from the typed stores:
its own pods, the nodes that host them and are down, and the jobs resuming from it."""

from __future__ import annotations

import asyncio

from multinode.api import TrainingJobStatus
from multinode.api.lifecycle import RestartStrategy
from multinode.controller.observe import Observer
from multinode.controller.progress_probe import ProgressProbe
from multinode.controller.stores import Stores
from multinode.reconcile.placement import ObservedNode
from multinode.reconcile.restart_strategy import with_restart_strategy
from multinode.testing import checkpointed_job, observed_pod
from tests.unit.controller.fake_kube import FakeKube

UID = "uid-123"  # stored_job's


def observer_of(stores: Stores) -> Observer:
    kube = FakeKube()
    probe = ProgressProbe(kube, stores.jobs, stores.pods, lambda raw: 0, lambda key: None)  # type: ignore[arg-type]
    return Observer(stores, kube, probe)  # type: ignore[arg-type]  # a fake KubeApi


def test_a_checkpointed_job_sees_its_pods_its_down_nodes_and_its_resumers() -> None:
    job = checkpointed_job()
    stores = Stores()
    stores.pods.put_pod("ml", observed_pod(0, node="up", owner_uid=UID))
    stores.pods.put_pod("ml", observed_pod(1, node="lost", owner_uid=UID))
    stores.pods.put_pod("ml", observed_pod(2, node="elsewhere", owner_uid="another-job"))
    stores.nodes.put("up", ObservedNode(name="up"))
    for name, phase in (("finetune", "Running"), ("eval", "Succeeded")):
        stores.jobs.file({"metadata": {"name": name, "namespace": "ml", "uid": name},
                          "spec": {"checkpointing": {"resumeFrom": {"trainingJob": "llama"}}},
                          "status": {"phase": phase, "resumedFrom": f"/ckpt/{name}"}})
    observed = asyncio.run(observer_of(stores).observe(job, ("ml", "llama")))
    assert [p.name for p in observed.pods] == ["llama-0-a0", "llama-1-a0"]
    assert list(observed.down_nodes) == ["lost"]  # not in the node store: gone
    assert sorted((r.name, r.finished, r.resumed_from) for r in observed.resumers) == [
        ("eval", True, "/ckpt/eval"), ("finetune", False, "/ckpt/finetune")]
    # No restart strategy chosen yet (restart_strategy.py): the cluster's nodes are read; once it is, and
    # without a topology, they are not.
    assert [n.name for n in observed.nodes] == ["up"]
    chosen = job.model_copy(update={"status": TrainingJobStatus(restart_strategy=RestartStrategy.IN_PLACE)})
    running = asyncio.run(observer_of(stores).observe(with_restart_strategy(chosen, chosen.status), ("ml", "llama")))
    assert running.nodes == ()


def test_a_disrupted_pods_reason_is_remembered_until_the_job_is_forgotten() -> None:
    observer = observer_of(Stores())
    observer.disrupted.remember(("ml", "llama"), "llama-0-a0", "PreemptionByScheduler")
    observed = asyncio.run(observer.observe(checkpointed_job(), ("ml", "llama")))
    assert observed.gone_disruptions == {"llama-0-a0": "PreemptionByScheduler"}
    observer.disrupted.forget(("ml", "llama"))
    assert observer.disrupted.of_job(("ml", "llama")) == {}


def test_a_job_sees_which_of_its_nodes_are_cordoned() -> None:
    stores = Stores()
    stores.pods.put_pod("ml", observed_pod(0, node="up", owner_uid=UID))
    stores.pods.put_pod("ml", observed_pod(1, node="drained", owner_uid=UID))
    stores.pods.put_pod("ml", observed_pod(2, node="other-drained", owner_uid="another-job"))
    stores.nodes.put("up", ObservedNode(name="up"))
    stores.nodes.put("drained", ObservedNode(name="drained", schedulable=False))
    stores.nodes.put("other-drained", ObservedNode(name="other-drained", schedulable=False))
    observed = asyncio.run(observer_of(stores).observe(checkpointed_job(), ("ml", "llama")))
    assert observed.cordoned_nodes == frozenset({"drained"})
