"""A hot spare's pod (spec.spareNodes; reconcile/spares.py decides when there is one, and which rank it takes).

A spare is a node pod without a rank yet: same resources, volumes, security and scheduling as the gang's
pods, on a machine of its own (no pod of the job shares it, and the gang's pods stay off it). The kubelet pulls
the trainer's image before anything starts (an image volume, which the kubelet pulls with the pod), preflight
checks the node and then waits, warm, until the operator writes a rank into the pod's annotations; the trainer
then starts and reads its rank, like the attempt and the rendezvous, from those annotations (the downward API,
resolved at each container start). A spare has no attempt ConfigMap: what every attempt shares is inline, what
changes is in the annotations.
"""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import (
    ANNOTATION_JOINED_IN,
    ANNOTATION_NODE_INDEX,
    GROUP,
    LABEL_HOSTNAME,
    LABEL_JOB_NAME,
    LABEL_SPARE,
    EnvName,
    spare_hostname,
)
from multinode.render.env import attempt_env, pod_identity_env, user_env
from multinode.render.in_place import IN_PLACE_ENV_NAMES, from_annotation, in_place_annotations, in_place_env
from multinode.render.names import common_labels, job_identity
from multinode.render.pod import preflight_container, render_node_pod, trainer_container
from multinode.render.settings import RenderSettings

# The trainer's image, pulled with the pod (never mounted): the spare's trainer starts without a pull.
SPARE_IMAGE_VOLUME = "multinode-trainer-image"

# The variables that name the node's rank: a spare reads them from its annotations once it has one.
RANK_ENV_NAMES = (EnvName.NODE_RANK, EnvName.PET_NODE_RANK, EnvName.MULTINODE_NODE_INDEX, EnvName.BT_NODE_RANK)


def spare_name(job_name: str, serial: int) -> str:
    """A spare's pod name, which is also its hostname."""
    return spare_hostname(job_name, serial)


def spare_env(job: TrainingJob) -> list[dict[str, Any]]:
    """The spare trainer's variables: every attempt's shared values inline; its rank, the attempt and the
    rendezvous from its annotations; then the user's."""
    shared = attempt_env(job, 0)
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in shared.items()
                                 if name not in IN_PLACE_ENV_NAMES]
    env += [from_annotation(name, ANNOTATION_NODE_INDEX) for name in RANK_ENV_NAMES]
    env += pod_identity_env()
    return env + in_place_env(job) + user_env(job)


def _any_pod_of_the_job(job_name: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {LABEL_JOB_NAME: job_name}}, "topologyKey": LABEL_HOSTNAME}


def render_spare_pod(job: TrainingJob, serial: int, settings: RenderSettings, *, image: str | None = None,
                     node_selector: dict[str, str] | None = None,
                     excluded_nodes: tuple[str, ...] = ()) -> dict[str, Any]:
    """Hot spare `serial` of `job`: a node pod (render_node_pod's, for its resources, volumes, security and
    scheduling) with no rank, made ready to take one. `image`: the pinned digest, if any (spec.image else)."""
    name, image = job_identity(job).name, image or job.spec.image
    pod = render_node_pod(job, 0, 0, settings, image=image, node_selector=node_selector,
                          excluded_nodes=excluded_nodes)
    meta, spec = pod["metadata"], pod["spec"]
    meta["name"] = spare_name(name, serial)
    meta["labels"] = {**(job.spec.pod_template.labels or {}), **common_labels(name), LABEL_SPARE: str(serial)}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(f"{GROUP}/")}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    spec["hostname"] = spare_name(name, serial)
    spec["initContainers"] = [preflight_container(job, None, [], settings)]
    spec["containers"] = [trainer_container(job, [], spare_env(job), image)]
    # One pod of the job per machine, whatever its attempt, and no two spares together (the node pods' own
    # anti-affinity terms, the last two, are about attempts and spares).
    required = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    required[-2:] = [_any_pod_of_the_job(name)]
    volume: dict[str, Any] = {"reference": image}
    if job.spec.image_pull_policy:
        volume["pullPolicy"] = job.spec.image_pull_policy
    spec["volumes"].append({"name": SPARE_IMAGE_VOLUME, "image": volume})
    return pod


def take_rank_annotations(job: TrainingJob, index: int, attempt: int, resume_from: str, restarts: int,
                          leader: str) -> dict[str, str]:
    """What gives a waiting spare node `index`'s rank in `attempt` (one patch: it is observed with both)."""
    return {ANNOTATION_NODE_INDEX: str(index), ANNOTATION_JOINED_IN: str(attempt),
            **in_place_annotations(job, attempt, resume_from, restarts, 0, leader)}
