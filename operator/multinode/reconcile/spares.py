"""Hot spares (spec.spareNodes; the pod is render/spare.py's): K extra pods, warm, that take a lost node's rank.

The pool. Spares are made once the gang runs (they come beyond numNodes: never in the gang's group, never
competing with the gang for a place) and kept at K: a spare that fails, or whose node is down or cordoned,
goes and another is made. Each is named after the lowest serial no pod of the job holds (<job>-s<serial>),
so planning again makes the same names. A finished or suspended job's spares go with its pods.

Taking a rank. When the failure policy replaces one lost node's pod while the rest of the gang restarts in
place (restartStrategy InPlace, in_place.py), a warm spare on a machine free of the gang takes that node's
index instead of a new pod: the operator writes the index and the attempt's values into its annotations, and
its preflight, which waited for exactly that, lets its trainer start. The spare's serial goes into the
attempt's restart record first, so that a pass that has not seen the annotations yet (or an operator
restarted in between) gives the rank to the same spare again instead of making a new pod; and when the rank
is 0's, the rest of the gang is told the spare's name as the new leader (MASTER_ADDR moves with rank 0).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from multinode.api import Phase, TrainingJob, TrainingJobStatus
from multinode.api.conditions import Reason
from multinode.api.status import SpareCounts
from multinode.reconcile.decision import Decision
from multinode.reconcile.node_loss import NodeDown
from multinode.reconcile.observe import ObservedPod, PodPhase
from multinode.reconcile.outcome import Event
from multinode.render.settings import RenderSettings
from multinode.render.spare import render_spare_pod, take_rank_annotations


def is_warm(spare: ObservedPod, down: Mapping[str, NodeDown], cordoned: Collection[str]) -> bool:
    """Waiting in its preflight on a node that is up and schedulable: its image is pulled (the kubelet pulls
    the pod's image volume before any container starts), its checks are run or running."""
    return (spare.waiting_spare and spare.in_preflight and not spare.terminating and spare.node is not None
            and spare.node not in down and spare.node not in cordoned)


def _unfit(spare: ObservedPod, down: Mapping[str, NodeDown], cordoned: Collection[str]) -> str | None:
    """Why a waiting spare can no longer serve (None: it can)."""
    if spare.phase in (PodPhase.FAILED, PodPhase.SUCCEEDED):
        return f"it ended ({spare.reason or spare.phase}{': ' + spare.message if spare.message else ''})"
    if spare.node is not None and spare.node in down:
        return f"its node {spare.node} {down[spare.node].words}"
    if spare.node in cordoned:
        return f"its node {spare.node} is cordoned"
    return None


def free_serials(pods: Iterable[ObservedPod], count: int, limit: int) -> list[int]:
    """Up to `count` of the lowest serials below `limit` that no pod of the job (a spare, waiting, working or
    going) holds. The limit keeps hostnames within what admission checked the job's name against (numNodes +
    2 × spareNodes): spares still going hold theirs, and a new one waits for them."""
    taken = {p.spare for p in pods if p.spare is not None}
    return [serial for serial in range(limit) if serial not in taken][:count]


def keep_spares(job: TrainingJob, status: TrainingJobStatus, spares: tuple[ObservedPod, ...],
                pods: tuple[ObservedPod, ...], *, phase: Phase, down: Mapping[str, NodeDown],
                cordoned: Collection[str], settings: RenderSettings, image: str | None,
                node_selector: dict[str, str] | None, excluded: tuple[str, ...]) -> Decision:
    """The pool at spec.spareNodes: unfit spares deleted (force-deleted on a down node), new ones made while
    the gang runs; status.spares counts them."""
    wanted = job.spec.spare_nodes
    if not wanted and not spares:
        return Decision(status={"spares": None}) if status.spares is not None else Decision()
    events: list[Event] = []
    delete: list[str] = []
    force: list[str] = []
    live: list[ObservedPod] = []
    for spare in (s for s in spares if not s.terminating):
        why = _unfit(spare, down, cordoned)
        if why is None:
            live.append(spare)
            continue
        (force if spare.node in down else delete).append(spare.name)
        events.append(Event("Warning", Reason.SPARE_REPLACED, f"hot spare {spare.name} deleted: {why}"))
    extra = sorted(live, key=lambda s: (is_warm(s, down, cordoned), -s.spare if s.spare is not None else 0))
    surplus = extra[:max(0, len(live) - wanted)]  # spec.spareNodes lowered (or a pass that made one twice)
    delete += [s.name for s in surplus]
    live = [s for s in live if s not in surplus]
    warm = sum(1 for s in live if is_warm(s, down, cordoned))
    taken = status.spares.taken if status.spares else 0
    counts = SpareCounts(wanted=wanted, warm=warm, starting=len(live) - warm, taken=taken)
    objects: list[dict[str, Any]] = []
    if phase == Phase.RUNNING and len(live) < wanted:
        objects = [render_spare_pod(job, serial, settings, image=image, node_selector=node_selector,
                                    excluded_nodes=excluded)
                   for serial in free_serials([*spares, *pods], wanted - len(live),
                                              job.spec.num_nodes + 2 * wanted)]
    return Decision(status={"spares": counts}, spares_to_create=tuple(objects), delete=tuple(delete),
                    force_delete=tuple(force), events=tuple(events))


def drop_spares(spares: tuple[ObservedPod, ...], status: TrainingJobStatus) -> Decision:
    """A finished or suspended job keeps no spare."""
    going = tuple(s.name for s in spares if not s.terminating)
    counts = status.spares.model_copy(update={"warm": 0, "starting": 0}) if status.spares else None
    return Decision(delete=going, status={"spares": counts} if status.spares else {})


def pick_spare(spares: Iterable[ObservedPod], down: Mapping[str, NodeDown], cordoned: Collection[str],
               busy: Collection[str | None]) -> ObservedPod | None:
    """The warm spare (lowest serial) on a machine no pod of the gang is on, if any."""
    warm = [s for s in spares if is_warm(s, down, cordoned) and s.node not in busy]
    return min(warm, key=lambda s: s.spare or 0, default=None)


def promised_spare(status: TrainingJobStatus, index: int) -> int | None:
    """The serial of the spare the current attempt's restart record gives node `index`'s rank, if any."""
    if not status.restart_history:
        return None
    record = status.restart_history[-1]
    if record.attempt != status.attempt - 1 or record.index != index:
        return None
    return record.spare


def promise(status: TrainingJobStatus, spare: ObservedPod) -> Decision:
    """Record in the attempt's restart record that `spare` takes the replaced node's rank."""
    record = status.restart_history[-1].model_copy(update={"spare": spare.spare})
    counts = status.spares or SpareCounts()
    return Decision(status={"restart_history": [*status.restart_history[:-1], record],
                            "spares": counts.model_copy(update={"taken": counts.taken + 1,
                                                                "warm": max(0, counts.warm - 1)})})


def take_rank(job: TrainingJob, status: TrainingJobStatus, spare: ObservedPod, index: int, leader: str,
              *, first: bool) -> Decision:
    """Give `spare` node `index`'s rank in the current attempt (again, when `first` is false: the annotations
    may not have landed). The Event is posted once."""
    annotations = take_rank_annotations(job, index, status.attempt, status.resumed_from or "", status.restarts,
                                        leader)
    events = (Event("Normal", Reason.SPARE_TOOK_RANK,
                    f"hot spare {spare.name} on node {spare.node} takes node {index}'s rank in attempt "
                    f"{status.attempt}"),) if first else ()
    return Decision(annotate=((spare.name, annotations),), events=events)


