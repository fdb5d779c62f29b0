"""The one protocol every integration with a scheduler or a queue implements (integrations/<name>/).

The planner (plan.py) and the controller know this protocol, never an integration: the controller is handed
the registry (integrations/registry.py), asks discovery for each integration's API once at start, watches
what each one watches, lets each observe a job, and gives the planner every integration with what it
observed (`Seen`). Modelled on Kubeflow Trainer v2's runtime framework plugins: one object per integration
implements the extension points it needs; `Integration` makes the others no-ops.

The extension points, in the order a pass meets them:

- `api`, `watches`: the API it needs served (asked once at start: an API installed later needs an operator
  restart), and the kinds it watches: objects a job owns, filed by the job's label, or cluster objects by
  name. `observe` reads what it needs of one job from those watches (no request, unless it says so).
- `gate`: whether the job may run now (a queue holds it until admitted), what its pods must select, and
  whether their creation must wait.
- `gang_mode` and `wants_gang`: the gang mechanism it provides, chosen for an attempt when its pods are first
  created (reconcile/gang.py), in registry order; `attempt_objects` and `pod_keys`: what that attempt gets (its
  group, created before the pods; the keys that join a pod to it); `group`, `places_domain`: what the
  gang's group says.
- `live_objects`, `finish`: what it tidies on every pass of a live job, and what it releases when the job ends.
- `refusal`: what a refused create of one of its objects means for the job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.api.status import GangMode
from multinode.reconcile.decision import Decision
from multinode.reconcile.kinds import ApiKind
from multinode.reconcile.observe import ObservedPod
from multinode.render.pod import PodKeys
from multinode.render.settings import RenderSettings

__all__ = ["ApiKind", "Gate", "GroupState", "Integration", "Reads", "Refused", "Seen", "Watch"]


@dataclass(frozen=True)
class Watch:
    """A kind an integration watches, and how one object of it is filed. Namespaced (`owned`): objects a job
    owns, filed under the job its label names; `observe` projects one to a value with `job_name` and
    `owner_uid`, or None (not one of ours). Cluster-scoped: filed by name, `observe` projects each."""

    kind: ApiKind
    observe: Callable[[Mapping[str, Any]], Any]
    owned: bool = True


class Reads(Protocol):
    """What `observe` may read for one job: the objects of `kind` the job controls, a cluster object by name,
    and one request, the value of a PriorityClass."""

    def owned(self, kind: ApiKind) -> list[Any]: ...

    def named(self, kind: ApiKind, name: str) -> Any | None: ...

    async def priority_class_value(self, name: str) -> int | None: ...


@dataclass(frozen=True)
class Gate:
    """A queue's word on a job that is not finished. `hold`: why the job must not run now (it is planned as
    suspended), None when it may; `node_selector`: what the attempt's pods must select; `wait`: why the pods
    are not created yet (the next pass comes after `wait_seconds`); `decision`: its conditions, status edits
    and actions."""

    hold: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    wait: str | None = None
    wait_seconds: float = 2.0
    decision: Decision = field(default_factory=Decision)


@dataclass(frozen=True)
class GroupState:
    """What a gang's group says of its attempt: its scheduled condition ("True", "False", None: not decided)
    and the scheduler's words."""

    name: str
    scheduled: str | None = None
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Refused:
    """What a refused create of an integration's object means: the job's conditions `conditions` False for
    `reason` with `message`, and the create retried with backoff (the cluster may change)."""

    conditions: tuple[str, ...]
    reason: str
    message: str


class Integration:
    """An integration, every extension point a no-op: a subclass overrides those it needs (see the module)."""

    name: str = ""
    api: ApiKind | None = None
    watches: tuple[Watch, ...] = ()
    gang_mode: GangMode | None = None
    # Whether an attempt it gangs has a group of its own (a PodGroup, named by reconcile/gang.py).
    per_attempt_group: bool = False
    # How the status names who places the gang ("the scheduler", "Volcano").
    placed_by: str = ""

    async def observe(self, job: TrainingJob, reads: Reads) -> Any:
        return None

    def gate(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen, pods: tuple[ObservedPod, ...],
             now: datetime, settings: RenderSettings) -> Gate | None:
        """None: the integration has no say over this job."""
        return None

    def wants_gang(self, job: TrainingJob, seen: Seen, current: Mapping[int, ObservedPod]) -> bool:
        return False

    def attempt_objects(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen) -> Decision:
        """For an attempt ganged by this integration, while its pods are created: its objects."""
        return Decision()

    def group(self, status: TrainingJobStatus, seen: Seen) -> GroupState | None:
        """The attempt's group as observed (None: not observed, or not watched)."""
        return None

    def places_domain(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen) -> bool | None:
        """With spec.topology: whether the gang's scheduler picks the domain (True), the operator does
        (False), or the group must be observed first (None)."""
        return False

    def pod_keys(self, job: TrainingJob, attempt: int, group: str | None) -> PodKeys:
        """What each pod of an attempt gets from this integration (`group`: the attempt's group when this
        integration gangs it, else None)."""
        return PodKeys()

    def live_objects(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen) -> Decision:
        """On every pass of a job that is not finished, once the attempt's pods are planned."""
        return Decision()

    def finish(self, job: TrainingJob, status: TrainingJobStatus, seen: Seen, now: datetime) -> Decision:
        """On every pass of a finished job."""
        return Decision()

    def refusal(self, api_version: str | None, http_status: int | None, message: str) -> Refused | None:
        """None: not a refusal this integration reads."""
        return None


@dataclass(frozen=True)
class Seen:
    """An integration as one pass sees it: the integration, whether the apiserver serves its API (asked once at
    start; True for one that needs none), and what it observed of the job (its own type)."""

    integration: Integration
    served: bool = True
    observed: Any = None
