"""Observe: what the planner is told about one job (reconcile's `Observed`), read from the typed stores.

Reads cost no request: the stores are kept current by the watches. The one exception is an integration's
(Kueue's, once per job): the value of a PriorityClass (reconcile/integration.py Reads). Every read is a lookup
by the job's key or by the name of a node hosting one of its pods: a reconcile costs O(its pods), never O(the
cluster).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from multinode.api import TrainingJob
from multinode.controller.kube import KubeApi
from multinode.controller.node_leases import NodeLeases
from multinode.controller.progress_probe import ProgressProbe
from multinode.controller.stores import JobKey, Stores
from multinode.reconcile import Observed
from multinode.reconcile.checkpointing import Resumer
from multinode.reconcile.integration import Seen
from multinode.reconcile.kinds import ApiKind
from multinode.reconcile.lease_loss import restarted_in_place
from multinode.reconcile.node_loss import NodeDown, node_down
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import TERMINAL_PHASES
from multinode.reconcile.placement import needs_nodes
from multinode.render.in_place import restarts_in_place

MAX_GONE_PER_JOB = 256  # disrupted pods remembered per job after their deletion (DisruptedPods)


@dataclass
class DisruptedPods:
    """Why deleted pods were disrupted, from their last watch event: the scheduler preempts and deletes at
    once, so the pod store no longer holds what the failure policy must know (reconcile/failures.py)."""

    by_job: dict[JobKey, dict[str, str]] = field(default_factory=dict)

    def remember(self, key: JobKey, name: str, disruption: str) -> None:
        gone = self.by_job.setdefault(key, {})
        gone[name] = disruption
        while len(gone) > MAX_GONE_PER_JOB:  # the oldest go: only the attempt being judged matters
            del gone[next(iter(gone))]

    def of_job(self, key: JobKey) -> dict[str, str]:
        return dict(self.by_job.get(key) or {})

    def forget(self, key: JobKey) -> None:
        self.by_job.pop(key, None)


@dataclass(frozen=True)
class JobReads:
    """What an integration's `observe` reads for one job (reconcile/integration.py Reads): its stores, and the
    one request an integration may make."""

    stores: Stores
    kube: KubeApi
    key: JobKey
    uid: str | None

    def owned(self, kind: ApiKind) -> list[Any]:
        store = self.stores.owned.get(kind)
        return store.of_job(*self.key, self.uid) if store is not None else []

    def named(self, kind: ApiKind, name: str) -> Any | None:
        store = self.stores.named.get(kind)
        return store.named(name) if store is not None else None

    async def priority_class_value(self, name: str) -> int | None:
        return await self.kube.priority_class_value(name)


class Observer:
    def __init__(self, stores: Stores, kube: KubeApi, probe: ProgressProbe, integrations: tuple[Seen, ...] = ()):
        self.stores, self.kube, self.probe = stores, kube, probe
        # Every integration, with whether the apiserver serves its API (handlers.py asks discovery once, at
        # start); an integration whose API is not served observes nothing.
        self.integrations = integrations
        self.disrupted = DisruptedPods()
        self.leases = NodeLeases(kube)

    async def observe(self, job: TrainingJob, key: JobKey) -> Observed:
        namespace, name = key
        uid = job.metadata.uid
        pods = self.stores.pods.of_job(namespace, name, uid)
        spares = [p for p in pods if p.waiting_spare]
        stores = [p for p in pods if p.rendezvous_store]
        pods = [p for p in pods if not p.waiting_spare and not p.rendezvous_store]
        mirror = self.stores.pods.mirror_of(namespace, name, uid)
        reads = JobReads(self.stores, self.kube, key, uid)
        # Leases tell a lost node from a crash (reconcile/lease_loss.py): for a spare to take a rank, or for the
        # ranks a trainer's restart in place took down with it.
        wanted = (job.spec.spare_nodes and spares) or (restarts_in_place(job) and restarted_in_place(pods))
        leases = await self.leases.current() if wanted else {}
        integrations = tuple([replace(seen, observed=await seen.integration.observe(job, reads)) if seen.served
                              else seen for seen in self.integrations])
        return Observed(pods=tuple(pods), service_exists=bool(self.stores.services.of_job(namespace, name, uid)),
                        mirror=mirror, resume_source_latest=self._resume_source_latest(job),
                        resumers=self._resumers(job),
                        nodes=self.stores.nodes.all() if needs_nodes(job, pods) else (),
                        down_nodes=self._down_nodes([*(p.node for p in [*pods, *spares, *stores]),
                                                     mirror.node if mirror else None]),
                        cordoned_nodes=self._cordoned_nodes([*pods, *spares]), spares=tuple(spares),
                        rendezvous_stores=tuple(stores),
                        node_leases={p.node: leases[p.node] for p in pods if p.node and p.node in leases},
                        progress=self.probe.progress(key), gone_disruptions=self.disrupted.of_job(key),
                        integrations=integrations)

    def _down_nodes(self, hosts: list[str | None]) -> dict[str, NodeDown]:
        """Of the nodes hosting this job's pods (and its mirror), those not Ready or gone: one lookup by name
        per node, so a reconcile costs O(pods), never O(nodes in the cluster)."""
        down = {}
        for host in {h for h in hosts if h}:
            state = node_down(self.stores.nodes.named(host))
            if state is not None:
                down[host] = state
        return down

    def _cordoned_nodes(self, pods: Iterable[ObservedPod]) -> frozenset[str]:
        """Of the nodes hosting this job's pods, those cordoned: one lookup by name per node, as above."""
        cordoned = set()
        for host in {p.node for p in pods if p.node}:
            node = self.stores.nodes.named(host)
            if node is not None and not node.schedulable:
                cordoned.add(host)
        return frozenset(cordoned)

    def _resumers(self, job: TrainingJob) -> tuple[Resumer, ...]:
        """The jobs of this namespace whose resumeFrom.trainingJob names `job` (a checkpointed one): read from
        the job store, which holds the namespace whole once its watch listed, so no pin is dropped because
        a resuming job was not reconciled yet. One lookup (JobStore.resumers_of), only for jobs with
        spec.checkpointing."""
        if job.spec.checkpointing is None:
            return ()
        namespace, name = job.metadata.namespace, job.metadata.name
        assert namespace is not None and name is not None, "a stored TrainingJob has a namespace and a name"
        found = []
        for other in self.stores.jobs.resumers_of(namespace, name):
            status = other.get("status") or {}
            found.append(Resumer(name=other["metadata"]["name"], finished=status.get("phase") in TERMINAL_PHASES,
                                 resumed_from=status.get("resumedFrom")))
        return tuple(found)

    def _resume_source_latest(self, job: TrainingJob) -> str | None:
        """The latest mirrored checkpoint of the job named in resumeFrom.trainingJob (same namespace)."""
        ckpt = job.spec.checkpointing
        if ckpt is None or ckpt.resume_from is None or ckpt.resume_from.training_job is None:
            return None
        source = self.stores.jobs.get((job.metadata.namespace or "", ckpt.resume_from.training_job))
        latest = ((source or {}).get("status") or {}).get("checkpoints", {}).get("latest") or {}
        return latest.get("path")
