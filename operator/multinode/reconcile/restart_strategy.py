"""The restart strategy a job runs with when spec.failurePolicy.restartStrategy leaves it unset: InPlace where
the cluster supports it, else BlockingRecreate (docs/operations.md#in-place-restarts).

InPlace restarts a killed rank's gang in 9.2 s against BlockingRecreate's 13.4 s on real nodes
(docs/benchmarks.md), so it is the default where it works. Where it does not, it costs more than it saves:
the scheduler places a pod with a RestartAllContainers rule only on nodes whose kubelet declares
RestartAllContainersOnContainerExits (status.declaredFeatures, Kubernetes 1.36), so on a cluster still
upgrading its kubelets the job's pods would wait for nodes that may never come. The choice is made once, at
the job's first pass, from the nodes that could host it (Ready, schedulable, its node selector and GPUs:
placement.fits; every Ready node when none fits yet), and kept in status.restartStrategy: the job never
changes strategy under its pods as nodes come and go.

- An elastic job recreates: its ranks restart in place through torchrun's agent (elastic.py), and the
  operator's in-place restarts would race its rendezvous (the CRD refuses InPlace with elastic).
- A job with spec.spareNodes restarts in place: a spare takes a lost node's rank while the others restart
  in place, which is what the user asked for.
"""

from __future__ import annotations

from collections.abc import Iterable

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.api.lifecycle import RestartStrategy
from multinode.reconcile.decision import Decision, SetCondition
from multinode.reconcile.placement import ObservedNode, fits
from multinode.render.in_place import IN_PLACE_NODE_FEATURE


def with_restart_strategy(job: TrainingJob, status: TrainingJobStatus | None) -> TrainingJob:
    """`job` as it runs: with the strategy chosen for it (status.restartStrategy) when its spec leaves it unset.
    Every layer then reads spec.failurePolicy.restartStrategy alone."""
    policy = job.spec.failure_policy
    chosen = status.restart_strategy if status is not None else None
    if policy.restart_strategy is not None or chosen is None:
        return job
    spec = job.spec.model_copy(update={"failure_policy": policy.model_copy(update={"restart_strategy": chosen})})
    return job.model_copy(update={"spec": spec})


def _choose(job: TrainingJob, status: TrainingJobStatus,
            nodes: Iterable[ObservedNode]) -> tuple[RestartStrategy, str, bool]:
    """The strategy, why, and whether the nodes ruled InPlace out."""
    if status.start_time is not None:
        # Pods made before this operator chose strategies (a job a rollback's operator started): the
        # strategy they were made with, the old default.
        return RestartStrategy.BLOCKING_RECREATE, "the job's pods were made before the choice", False
    if job.spec.elastic is not None:
        why = "an elastic job's ranks restart in place through torchrun's agent"
        return RestartStrategy.BLOCKING_RECREATE, why, False
    if job.spec.spare_nodes:
        return RestartStrategy.IN_PLACE, "spec.spareNodes: a spare takes a lost node's rank in place", False
    ready = [n for n in nodes if n.ready]
    if not ready:
        why = f"no node is Ready to declare {IN_PLACE_NODE_FEATURE} (status.declaredFeatures) yet"
        return RestartStrategy.BLOCKING_RECREATE, why, True
    fitting = [n for n in ready if fits(job, n)]
    asked = f"{len(fitting)} Ready nodes that fit the job" if fitting else f"{len(ready)} Ready nodes"
    lacking = [n.name for n in fitting or ready if IN_PLACE_NODE_FEATURE not in n.declared_features]
    if lacking:
        why = (f"{len(lacking)} of {asked} do not declare {IN_PLACE_NODE_FEATURE} (status.declaredFeatures; "
               f"first: {min(lacking)}): a kubelet older than Kubernetes 1.36, or its feature gate off, and the "
               "scheduler would keep the pods off those nodes")
        return RestartStrategy.BLOCKING_RECREATE, why, True
    return RestartStrategy.IN_PLACE, f"all {asked} declare {IN_PLACE_NODE_FEATURE}", False


def choose_restart_strategy(job: TrainingJob, status: TrainingJobStatus,
                            nodes: Iterable[ObservedNode]) -> Decision:
    """status.restartStrategy: the spec's; or, once, the one chosen for a spec that leaves it unset, with
    InPlaceRestarts False saying why when the nodes ruled InPlace out. (No Event: one more request for every
    job created; the status and, once its pods exist, InPlaceRestarts say it.)"""
    asked = job.spec.failure_policy.restart_strategy
    if asked is not None:
        return Decision() if status.restart_strategy == asked else \
            Decision(status={"restart_strategy": RestartStrategy(asked)})
    if status.restart_strategy is not None:
        return Decision()
    strategy, why, ruled_out = _choose(job, status, nodes)
    if not ruled_out:
        return Decision(status={"restart_strategy": strategy})
    return Decision(status={"restart_strategy": strategy}, conditions=(SetCondition(
        ConditionType.IN_PLACE_RESTARTS, "False", Reason.NODES_LACK_IN_PLACE_RESTARTS,
        f"failurePolicy.restartStrategy unset, so {strategy.value}: {why}; a failure recreates the gang"),))
