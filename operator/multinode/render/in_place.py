"""What a node pod of a job with failurePolicy.restartStrategy InPlace carries, so that its gang can restart
without new pods (docs/operations.md#in-place-restarts).

- The trainer container's restart rule: an exit code the failure policy's rules do not name restarts every
  container of the pod in place (Kubernetes 1.36, RestartAllContainers), preflight included. A code a rule
  names is left to the pod failure, so the rule decides with the code in hand (the kubelet keeps no exit
  code of a container it restarts this way).
- The attempt the pod runs, the checkpoint it resumes from and the job's restart count as annotations the
  operator rewrites when it declares an in-place attempt; the trainer reads them as env through the downward
  API, which the kubelet resolves again at each container start.
- The barrier: preflight, at each start after the first, waits until the operator has written a newer
  attempt into the pod (a downward API file), so no trainer starts a restarted attempt with the old values.
  What it passed last is kept in an emptyDir, which outlives the containers.
"""

from __future__ import annotations

from typing import Any

from multinode.api import TrainingJob
from multinode.api.constants import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_LEADER,
    ANNOTATION_RENDEZVOUS_ID,
    ANNOTATION_RENDEZVOUS_PORT,
    ANNOTATION_RESTART_COUNT,
    ANNOTATION_RESUME_FROM,
    ANNOTATION_TRAINER_RESTARTS,
    EnvName,
)
from multinode.api.lifecycle import FailureAction, RestartStrategy
from multinode.render.env import field_ref, rendezvous_id, rendezvous_port
from multinode.render.names import job_identity

# The kubelet's action (k8s.io/api core/v1 ContainerRestartRuleActionRestartAllContainers).
RESTART_ALL_CONTAINERS = "RestartAllContainers"
# What a kubelet that serves it lists in its node's status.declaredFeatures (Kubernetes 1.36,
# k8s.io/component-helpers nodedeclaredfeatures): the scheduler places a pod with that action only there.
IN_PLACE_NODE_FEATURE = "RestartAllContainersOnContainerExits"
MAX_RULE_VALUES = 255  # the apiserver's limit on one rule's exit codes

BARRIER_VOLUME = "multinode-in-place"
BARRIER_STATE_VOLUME = "multinode-in-place-state"
BARRIER_MOUNT_PATH = "/etc/multinode/in-place"
BARRIER_STATE_MOUNT_PATH = "/run/multinode/in-place"
BARRIER_ATTEMPT_FILE = f"{BARRIER_MOUNT_PATH}/attempt"
# The attempt's leader (multinode.dev/leader): the one name the preflight resolves in an in-place gang.
BARRIER_LEADER_FILE = f"{BARRIER_MOUNT_PATH}/leader"
BARRIER_STATE_FILE = f"{BARRIER_STATE_MOUNT_PATH}/passed"


def restarts_in_place(job: TrainingJob) -> bool:
    return job.spec.failure_policy.restart_strategy == RestartStrategy.IN_PLACE


def codes_left_to_rules(job: TrainingJob) -> set[int]:
    """Non-zero exit codes a failure policy rule names: these fail the pod, so the rule sees the code."""
    codes: set[int] = set()
    for rule in job.spec.failure_policy.rules or []:
        if rule.action == FailureAction.RESTART and rule.on_reasons is None and rule.on_node_loss is None:
            continue  # it says what the in-place restart does anyway
        for r in rule.on_exit_codes or []:
            codes.update(range(max(1, r.min), r.max + 1))
    return codes


def trainer_restart_rules(job: TrainingJob) -> list[dict[str, Any]]:
    """The trainer's restartPolicyRules: RestartAllContainers on the non-zero codes no rule names (as In or
    NotIn, whichever list is shorter: one rule holds at most 255 codes). None when every code is named."""
    named = codes_left_to_rules(job)
    in_place = sorted(set(range(1, 256)) - named)
    if not in_place:
        return []
    not_in = sorted({0, *named})
    codes = {"operator": "In", "values": in_place} if len(in_place) <= len(not_in) else \
        {"operator": "NotIn", "values": not_in}
    assert len(codes["values"]) <= MAX_RULE_VALUES
    return [{"action": RESTART_ALL_CONTAINERS, "exitCodes": codes}]


def in_place_annotations(job: TrainingJob, attempt: int, resume_from: str, restarts: int, trainer_restarts: int,
                         leader: str) -> dict[str, str]:
    """What the operator writes into a pod for the attempt it runs (at creation, and at each in-place restart):
    also the attempt's rendezvous, `leader` being rank 0's DNS name (names.leader_dns_name)."""
    return {ANNOTATION_ATTEMPT: str(attempt), ANNOTATION_RESUME_FROM: resume_from,
            ANNOTATION_RESTART_COUNT: str(restarts), ANNOTATION_TRAINER_RESTARTS: str(trainer_restarts),
            ANNOTATION_LEADER: leader,
            ANNOTATION_RENDEZVOUS_PORT: str(rendezvous_port(job.spec.network.rendezvous_port, attempt)),
            ANNOTATION_RENDEZVOUS_ID: rendezvous_id(job_identity(job).uid, attempt)}


def from_annotation(name: str, annotation: str) -> dict[str, Any]:
    """A variable read from one of the pod's annotations (the downward API), at each container start."""
    return field_ref(name, f"metadata.annotations['{annotation}']")


def rendezvous_env() -> list[dict[str, Any]]:
    """The attempt's rendezvous (leader, port, id) as an in-place pod reads it: from its annotations."""
    sources = {ANNOTATION_LEADER: (EnvName.MASTER_ADDR, EnvName.PET_MASTER_ADDR, EnvName.BT_LEADER_ADDR),
               ANNOTATION_RENDEZVOUS_PORT: (EnvName.MASTER_PORT, EnvName.PET_MASTER_PORT),
               ANNOTATION_RENDEZVOUS_ID: (EnvName.PET_RDZV_ID, EnvName.MULTINODE_RDZV_ID)}
    return [from_annotation(name, annotation) for annotation, names in sources.items() for name in names]


def in_place_env(job: TrainingJob) -> list[dict[str, Any]]:
    """The trainer's variables that change with an in-place attempt, read from the pod's annotations. Inline
    `env` wins over the attempt ConfigMap's envFrom, which the pods keep from their creation."""
    env = [{"name": EnvName.MULTINODE_ATTEMPT_FILE, "value": BARRIER_ATTEMPT_FILE},
           from_annotation(EnvName.MULTINODE_ATTEMPT, ANNOTATION_ATTEMPT),
           from_annotation(EnvName.MULTINODE_RESTART_COUNT, ANNOTATION_RESTART_COUNT),
           from_annotation(EnvName.BT_RETRY_COUNT, ANNOTATION_RESTART_COUNT), *rendezvous_env()]
    if job.spec.checkpointing is not None:
        env += [from_annotation(EnvName.MULTINODE_RESUME_FROM, ANNOTATION_RESUME_FROM),
                from_annotation(EnvName.BT_LOAD_CHECKPOINT_DIR, ANNOTATION_RESUME_FROM)]
    return env


IN_PLACE_ENV_NAMES = frozenset({EnvName.MULTINODE_ATTEMPT_FILE, EnvName.MULTINODE_ATTEMPT,
                                EnvName.MULTINODE_RESTART_COUNT, EnvName.BT_RETRY_COUNT,
                                EnvName.MULTINODE_RESUME_FROM, EnvName.BT_LOAD_CHECKPOINT_DIR,
                                EnvName.MASTER_ADDR, EnvName.PET_MASTER_ADDR, EnvName.BT_LEADER_ADDR,
                                EnvName.MASTER_PORT, EnvName.PET_MASTER_PORT, EnvName.PET_RDZV_ID,
                                EnvName.MULTINODE_RDZV_ID})


def barrier_volumes() -> list[dict[str, Any]]:
    return [
        {"name": BARRIER_VOLUME, "downwardAPI": {"items": [
            {"path": "attempt", "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_ATTEMPT}']"}},
            {"path": "leader", "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_LEADER}']"}}]}},
        # Tiny: one number. Not memory-backed, so it never counts against the pod's memory limit.
        {"name": BARRIER_STATE_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}},
    ]


def barrier_mounts() -> list[dict[str, Any]]:
    return [trainer_attempt_mount(), {"name": BARRIER_STATE_VOLUME, "mountPath": BARRIER_STATE_MOUNT_PATH}]


def trainer_attempt_mount() -> dict[str, Any]:
    """The pod's attempt file, read-only, where multinode.progress.leave_on_new_attempt watches it."""
    return {"name": BARRIER_VOLUME, "mountPath": BARRIER_MOUNT_PATH, "readOnly": True}


def barrier_args(job: TrainingJob) -> list[str]:
    """The preflight's barrier arguments. With hot spares, its DNS wait is for the attempt's leader only: a
    spare holds a rank under its own name, so some `<job>-<index>` may never resolve again. Without them every
    rank keeps its `<job>-<index>` name (a replaced pod too), and every name is waited for: a peer that never
    gets a record is named at once (PeerDNSUnresolved), not left to the trainer's rendezvous timeout."""
    args = ["--in-place-attempt-file", BARRIER_ATTEMPT_FILE, "--in-place-state-file", BARRIER_STATE_FILE]
    return [*args, "--in-place-leader-file", BARRIER_LEADER_FILE] if job.spec.spare_nodes else args
