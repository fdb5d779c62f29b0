"""A gang restarted in place that lost one node's pod (in_place.py): the rank goes to a warm hot spare when
there is one (spares.py), else to a new pod of the current attempt; and the spare pool kept while the gang
runs. Steps of plan.py's pass, kept apart so the planner stays a list of policies."""

from __future__ import annotations

from multinode.reconcile.exclusion import exclude_unhealthy_nodes, excluded_node_names, prune_expired
from multinode.reconcile.image_consistency import pinned_image
from multinode.reconcile.in_place import leader
from multinode.reconcile.integration import Gate
from multinode.reconcile.observe import ObservedPod
from multinode.reconcile.outcome import PodStream, Verdict
from multinode.reconcile.placement import attempt_node_selector
from multinode.reconcile.planning_pass import Pass, with_gate_selectors
from multinode.reconcile.spares import keep_spares, pick_spare, promise, promised_spare, take_rank
from multinode.render import render_node_pod
from multinode.render.names import job_name, pod_name


def keep_spare_pool(p: Pass, verdict: Verdict) -> None:
    """The hot spare pool (spares.py), made while the gang runs, in the attempt's domain, off excluded nodes."""
    job, status, observed = p.job, p.status, p.observed
    if not job.spec.spare_nodes and not observed.spares and status.spares is None:
        return
    # A spare whose node failed its health check keeps the next spare off that node, as a node pod would.
    p.take(exclude_unhealthy_nodes(job, status, [s for s in observed.spares if s.unhealthy and not s.terminating],
                                   p.now))
    selector, _ = attempt_node_selector(job, status, observed.nodes)
    p.take(keep_spares(job, status, observed.spares, observed.pods, phase=verdict.phase,
                       down=observed.down_nodes, cordoned=observed.cordoned_nodes, settings=p.settings,
                       image=pinned_image(job, status), node_selector=selector,
                       excluded=tuple(excluded_node_names(status, p.now))))


def give_rank_to_spare(p: Pass, staying: dict[int, ObservedPod], index: int) -> None:
    """A warm spare on a machine free of the gang takes the replaced node's rank, when there is one."""
    observed = p.observed
    spare = pick_spare(observed.spares, observed.down_nodes, observed.cordoned_nodes,
                       {pod.node for pod in staying.values()})
    if spare is None:
        return
    p.take(promise(p.status, spare))
    p.take(take_rank(p.job, p.status, spare, index, leader(p.job, p.status, staying), first=True))


def _taken_by_spares(p: Pass, current: dict[int, ObservedPod], missing: list[int]) -> list[int]:
    """Of the `missing` nodes, those whose rank a waiting spare was given (told again: the annotations may not
    have landed, or the operator restarted in between)."""
    taken = []
    for index in missing:
        serial = promised_spare(p.status, index)
        spare = next((s for s in p.observed.spares if s.spare == serial and not s.terminating), None)
        if serial is None or spare is None:
            continue  # no spare was given it, or the one given it is gone: a new pod takes it
        p.take(take_rank(p.job, p.status, spare, index, leader(p.job, p.status, current), first=False))
        taken.append(index)
    return taken


def replace_missing(p: Pass, current: dict[int, ObservedPod], missing: list[int], gates: list[Gate]) -> None:
    """The `missing` nodes of a gang restarted in place: a spare given the rank is told again; the others get
    new pods of the current attempt, with the gang's own ConfigMap, checkpoint and domain, no gang group (the
    rest of the gang is placed already), kept off the nodes of the other pods whatever attempt they were made
    for."""
    job, status, now = p.job, p.status, p.now
    assert status.pods_attempt is not None
    taken = _taken_by_spares(p, current, missing)
    missing = [i for i in missing if i not in taken]
    if not missing:
        return
    p.take(prune_expired(status, now))
    excluded = excluded_node_names(status, now)
    node_selector, placed = attempt_node_selector(job, status, p.observed.nodes)
    p.take(placed)
    node_selector = with_gate_selectors(node_selector, gates)
    gang = (status.pods_attempt, *sorted({pod.attempt for pod in current.values()} - {status.pods_attempt}))
    image, resume, attempt, name = pinned_image(job, status), status.resumed_from or "", status.attempt, job_name(job)
    rank0 = leader(job, status, current)
    p.result.pods_to_create = PodStream(
        missing, lambda i: pod_name(name, i, attempt),
        lambda i: render_node_pod(job, i, attempt, p.settings, resume_from=resume, image=image,
                                  node_selector=node_selector, excluded_nodes=excluded, restarts=status.restarts,
                                  gang=gang, leader=rank0))
