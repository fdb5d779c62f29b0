"""Observe: what the planner is told about one job (reconcile's `Observed`), read from the typed stores.

Reads cost no request: the stores are kept current by the watches. The one exception is Kueue's, once per
job: the value of its PriorityClass, read when its Workload is made. Every read is a lookup by the job's key
or by the name of a node hosting one of its pods: a reconcile costs O(its pods), never O(the cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from multinode.api import TrainingJob
from multinode.controller.kube import KubeApi
from multinode.controller.progress_probe import ProgressProbe
from multinode.controller.stores import JobKey, Stores
from multinode.reconcile import Observed
from multinode.reconcile.checkpointing import Resumer
from multinode.reconcile.kueue import queue_name
from multinode.reconcile.node_loss import NodeDown, node_down
from multinode.reconcile.outcome import TERMINAL_PHASES
from multinode.reconcile.placement import needs_nodes

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


class Observer:
    def __init__(self, stores: Stores, kube: KubeApi, probe: ProgressProbe, *, gang_api: bool = False,
                 kueue_api: bool = False):
        self.stores, self.kube, self.probe = stores, kube, probe
        # Whether the apiserver serves native PodGroups and Kueue's Workloads (handlers.py asks discovery
        # once, at start).
        self.gang_api, self.kueue_api = gang_api, kueue_api
        self.disrupted = DisruptedPods()

    async def observe(self, job: TrainingJob, key: JobKey) -> Observed:
        namespace, name = key
        uid = job.metadata.uid
        pods = self.stores.pods.of_job(namespace, name, uid)
        mirror = self.stores.pods.mirror_of(namespace, name, uid)
        return Observed(pods=tuple(pods), service_exists=bool(self.stores.services.of_job(namespace, name, uid)),
                        mirror=mirror, resume_source_latest=self._resume_source_latest(job),
                        resumers=self._resumers(job),
                        nodes=self.stores.nodes.all() if needs_nodes(job, pods) else (),
                        down_nodes=self._down_nodes([*(p.node for p in pods), mirror.node if mirror else None]),
                        progress=self.probe.progress(key), gone_disruptions=self.disrupted.of_job(key),
                        gang_api=self.gang_api,
                        pod_groups=tuple(self.stores.pod_groups.of_job(namespace, name, uid)),
                        **await self._kueue_observed(job, key))

    async def _kueue_observed(self, job: TrainingJob, key: JobKey) -> dict[str, Any]:
        """What the Kueue integration reads (reconcile/kueue.py): nothing for a job without a queue name."""
        if not self.kueue_api or queue_name(job) is None:
            return {"kueue_api": self.kueue_api}
        workloads = self.stores.workloads.of_job(*key, job.metadata.uid)
        workload = workloads[0] if workloads else None
        flavors = {}
        for name in workload.flavors if workload is not None else ():
            labels = self.stores.flavors.named(name)
            if labels is not None:
                flavors[name] = labels
        priority = None
        priority_class = job.spec.pod_template.priority_class_name
        if workload is None and priority_class:  # read once, when the Workload is made
            priority = await self.kube.priority_class_value(priority_class)
        return {"kueue_api": True, "workload": workload, "flavors": flavors, "priority": priority}

    def _down_nodes(self, hosts: list[str | None]) -> dict[str, NodeDown]:
        """Of the nodes hosting this job's pods (and its mirror), those not Ready or gone: one lookup by name
        per node, so a reconcile costs O(pods), never O(nodes in the cluster)."""
        down = {}
        for host in {h for h in hosts if h}:
            state = node_down(self.stores.nodes.named(host))
            if state is not None:
                down[host] = state
        return down

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
