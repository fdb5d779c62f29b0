"""Kueue as an integration: what the operator watches (the job's Workload, every ResourceFlavor), what it reads
of a queued job, its gate (policy.py), the Workload it owns (workload.py), its Finished status when the job
ends, and what a 404 on the Workload means."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from http import HTTPStatus

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.conditions import ConditionType, Reason
from multinode.integrations.kueue.policy import (FLAVOR_WAIT_SECONDS, RESOURCE_FLAVOR, WORKLOAD, ObservedWorkload,
                                                 finish_workload, kueue_gate, observe_flavor, observe_workload,
                                                 queue_name)
from multinode.integrations.kueue.workload import render_workload
from multinode.reconcile.decision import Decision
from multinode.reconcile.integration import Gate, Integration, Reads, Refused, Seen, Watch
from multinode.reconcile.kinds import ObjectRef
from multinode.reconcile.observe import ObservedPod
from multinode.render.settings import RenderSettings

# How a held job's status says why it does not run.
HELD = "queued in Kueue, not admitted"


@dataclass(frozen=True)
class KueueObserved:
    """What a queued job's pass reads: its Workload, the nodeLabels of the ResourceFlavors its admission names
    (by name; one not watched yet is missing), and the value of its PriorityClass, read once, while it has no
    Workload (Kueue orders its queue by it)."""

    workload: ObservedWorkload | None = None
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    priority: int | None = None


class Kueue(Integration):
    name = "kueue"
    api = WORKLOAD
    watches = (Watch(WORKLOAD, observe_workload), Watch(RESOURCE_FLAVOR, observe_flavor, owned=False))

    async def observe(self, job: TrainingJob, reads: Reads) -> KueueObserved | None:
        """Nothing for a job without a queue name."""
        if queue_name(job) is None:
            return None
        workloads = reads.owned(WORKLOAD)
        workload = workloads[0] if workloads else None
        flavors = {}
        for name in workload.flavors if workload is not None else ():
            labels = reads.named(RESOURCE_FLAVOR, name)
            if labels is not None:
                flavors[name] = labels
        priority_class = job.spec.pod_template.priority_class_name
        priority = await reads.priority_class_value(priority_class) if workload is None and priority_class else None
        return KueueObserved(workload, flavors, priority)

    def gate(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen, pods: tuple[ObservedPod, ...],
             now: datetime, settings: RenderSettings) -> Gate | None:
        observed = seen.observed if isinstance(seen.observed, KueueObserved) else KueueObserved()
        gate, said = kueue_gate(job, status, observed.workload, served=seen.served, flavors=observed.flavors,
                                pods=pods, now=now)
        if gate is None:  # not queued (nothing said), or Kueue not served (the job runs, and says so)
            return None if said == Decision() else Gate(decision=said)
        actions = Decision(
            objects_to_create=(render_workload(job, settings, priority=observed.priority),)
            if gate.create_workload else (),
            objects_to_delete=(ObjectRef(WORKLOAD, gate.delete_workload),) if gate.delete_workload else (),
            status_writes=(gate.workload_status,) if gate.workload_status is not None else (),
            job_suspend=gate.set_suspend)
        return Gate(hold=HELD if gate.hold else None, node_selector=gate.node_selector,
                    wait="waiting to read the ResourceFlavors Kueue assigned" if gate.flavors_pending else None,
                    wait_seconds=FLAVOR_WAIT_SECONDS, decision=said.then(actions))

    def finish(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen, now: datetime) -> Decision:
        """A finished job's Workload gets Finished True, which frees its quota."""
        workload = seen.observed.workload if isinstance(seen.observed, KueueObserved) else None
        write = finish_workload(job, status, workload, now)
        return Decision(status_writes=(write,)) if write is not None else Decision()

    def refusal(self, api_version: str | None, http_status: int | None, message: str) -> Refused | None:
        """404 on the Workload: Kueue's CRDs are gone since the operator started. The job says
        KueueNotInstalled and stays suspended; retried with backoff."""
        if http_status != HTTPStatus.NOT_FOUND or api_version != WORKLOAD.api_version:
            return None
        return Refused((ConditionType.KUEUE_ADMITTED,), Reason.KUEUE_NOT_INSTALLED,
                       f"the apiserver serves no {WORKLOAD.api_version} Workload (is Kueue installed, with its "
                       f"CRDs?): {message}; the job stays suspended, retrying")
