"""TrainingJob status: written only by the operator, through the status subresource."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator
from pydantic.config import JsonDict

from multinode.api.base import MAX_PATH_LENGTH, StatusModel
from multinode.api.elastic import ElasticStatus
from multinode.api.checkpointing import MAX_RESUMED_BY, CheckpointRequestStatus, CheckpointsStatus, ResumedByStatus
from multinode.api.goodput import GoodputStatus
from multinode.api.lifecycle import RestartStrategy
from multinode.api.progress import ProgressStatus
from multinode.api.health_check import MAX_EXCLUDED_NODES, ExcludedNode, NodeHealth

_DATE_TIME: JsonDict = {"format": "date-time"}
# The status's lists are replaced whole: the operator writes its status as a merge patch, which replaces a list
# whatever its type, and one writer owns each list. Keyed lists ("map") would buy nothing for that and cost
# the apiserver on every status write (its field manager and validation walk them entry by entry): a status
# write of an 8-node job cost it 20.0 ms of CPU keyed against 15.8 ms atomic, side by side
# (tools/bench/status_write.py; docs/benchmarks.md, throughput).
ATOMIC_LIST: JsonDict = {"x-kubernetes-list-type": "atomic"}

ConditionStatus = Literal["True", "False", "Unknown"]
MAX_CONDITION_MESSAGE = 32768
# Rows of status.nodeStatuses at most: a 20 000-node job's status stays a few tens of kilobytes (etcd's object
# limit is 1.5 MiB); nodeCounts counts every node and nodeStatusesOmitted the rows left out.
MAX_NODE_STATUSES = 100


class Phase(StrEnum):
    """Coarse lifecycle phase, for the printer column; conditions carry the detail."""

    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


# A job in one of these phases is finished: never recreated. A StrEnum, so the phase strings of a raw status
# (the client reads JSON) are members too.
TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})


class GangMode(StrEnum):
    """How the current attempt's pods are gang-scheduled."""

    # The native scheduling.k8s.io PodGroup (Kubernetes 1.36 alpha): the scheduler binds all or none.
    POD_GROUP = "PodGroup"
    # spec.scheduling.volcano / coscheduling: that scheduler's PodGroup per attempt, made by the operator.
    VOLCANO = "Volcano"
    COSCHEDULING = "Coscheduling"
    # spec.podGroup (deprecated): labels for an out-of-tree gang scheduler, which gangs them; no group made.
    EXTERNAL = "External"
    # The apiserver does not serve PodGroups: pods are bound one by one; the operator releases a partial
    # gang after spec.scheduling.partialGangTimeoutSeconds.
    NONE = "None"


class SchedulingStatus(StatusModel):
    """How the current attempt is scheduled as a gang."""

    gang: GangMode = Field(description="PodGroup (native gang scheduling), Volcano or Coscheduling "
                                       "(spec.scheduling names that scheduler; the operator made its PodGroup), "
                                       "External (spec.podGroup: labels for an out-of-tree gang scheduler) or "
                                       "None (the apiserver serves no PodGroup, or spec.scheduling.nativePodGroup "
                                       "is false; partial gangs are released after a timeout).")
    pod_group: str | None = Field(None, max_length=253, description="The attempt's PodGroup (gang PodGroup, "
                                                                   "Volcano or Coscheduling).")
    partial_since: str | None = Field(None, description="Gang None: since when some pods are bound and others "
                                                        "unschedulable.", json_schema_extra=_DATE_TIME)
    releases: int = Field(0, ge=0, description="Partial gangs released so far (not restarts).")
    next_try_time: str | None = Field(None, description="After a release: when the next attempt's pods are "
                                                        "created.", json_schema_extra=_DATE_TIME)


class Condition(StatusModel):
    """One observation about the job, per the Kubernetes API conventions (metav1.Condition)."""

    # type stays a free string, as in metav1.Condition: adding a condition type must
    # not need a CRD change that older operators would reject.
    type: str = Field(
        max_length=316,
        pattern=(
            r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        ),
        description="Condition type: Created, Running, Succeeded, Failed, Suspended, ImageConsistent, "
                    "CheckpointsSynced, Progressing, Stragglers or GangScheduled.",
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="CamelCase reason for the last transition, for machines.",
    )
    message: str = Field("", max_length=MAX_CONDITION_MESSAGE, description="Details for humans.")
    last_transition_time: str = Field(
        description="RFC3339 time the status last changed.", json_schema_extra=_DATE_TIME
    )
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation the condition was computed from."
    )


class NodeStatus(StatusModel):
    """What the operator last saw of one node's pod."""

    index: int = Field(ge=0, description="Node index (NODE_RANK).")
    pod: str | None = Field(None, description="Name of the node's current pod.")
    node: str | None = Field(None, description="Kubernetes node the pod runs on.")
    phase: str | None = Field(None, description="Pod phase (Pending, Running, Succeeded, Failed).")
    reason: str | None = Field(None, description="Why the pod is in that phase, when known.")
    exit_code: int | None = Field(None, description="Exit code of the trainer container.")
    health: NodeHealth | None = Field(None, description="The node's health check verdict (spec.healthCheck).")


class NodeCounts(StatusModel):
    """How many of the job's nodes are in each state, for the current attempt: every node is counted, whether
    or not status.nodeStatuses lists it."""

    no_pod: int = Field(0, ge=0, description="Nodes without a pod of the current attempt (not created yet, or "
                                             "deleted).")
    pending: int = Field(0, ge=0, description="Nodes whose pod is Pending.")
    running: int = Field(0, ge=0, description="Nodes whose pod is Running.")
    succeeded: int = Field(0, ge=0, description="Nodes whose pod Succeeded.")
    failed: int = Field(0, ge=0, description="Nodes whose pod Failed.")
    unknown: int = Field(0, ge=0, description="Nodes whose pod's phase is Unknown.")
    not_fine: int = Field(0, ge=0, description="Nodes that are not fine: no pod, not Running or Succeeded, a "
                                               "reason, a non-zero exit code or a failed health check.")


class SpareCounts(StatusModel):
    """The job's hot spares (spec.spareNodes)."""

    wanted: int = Field(0, ge=0, description="spec.spareNodes.")
    warm: int = Field(0, ge=0, description="Spares waiting on a Ready node, past their pull and health check: "
                                           "ready to take a lost node's rank.")
    starting: int = Field(0, ge=0, description="Spares made but not warm yet (scheduling, pulling, checking).")
    taken: int = Field(0, ge=0, description="Ranks spares have taken over the job's life.")


# status.restartHistory keeps the newest restarts only.
MAX_RESTART_HISTORY = 10


class RestartRecord(StatusModel):
    """Why one gang attempt ended in a restart."""

    attempt: int = Field(ge=0, description="The attempt that failed.")
    reason: str = Field(max_length=128, description="CamelCase reason, e.g. PodFailed, NodeLost, StartupTimeout.")
    message: str = Field("", max_length=4096, description="What failed, naming the pod and exit code.")
    counted: bool = Field(description="Whether it used up one of failurePolicy.maxRestarts.")
    time: str = Field(description="RFC3339 time the restart was decided.", json_schema_extra=_DATE_TIME)
    index: int | None = Field(None, ge=0, description="The node whose pod was the cause, when one was (with "
                                                      "restartStrategy InPlace, the one pod a lost or unhealthy "
                                                      "node's restart replaces).")
    spare: int | None = Field(None, ge=0, description="The hot spare (its serial: pod <job>-s<serial>) that took "
                                                      "that node's rank (spec.spareNodes).")


class TrainingJobStatus(StatusModel):
    """Observed state of a TrainingJob."""

    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation this status reflects."
    )
    phase: Phase | None = Field(None, description="Coarse phase, shown by kubectl get.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Conditions (Created, Running, Succeeded, Failed, Suspended, ImageConsistent, CheckpointsSynced, "
                    "CheckpointMirror, Progressing, Stragglers, GangScheduled, KueueAdmitted, InPlaceRestarts; "
                    "Ready, Reconciling, Stalled for kstatus), one per type.",
        json_schema_extra=ATOMIC_LIST,
    )
    ready_nodes: int = Field(0, ge=0, description="Nodes whose pod is running and ready.")
    num_nodes: int | None = Field(None, ge=0, description="spec.numNodes, for the printer column.")
    ready: str | None = Field(None, description="readyNodes/numNodes, for example 3/4.")
    start_time: str | None = Field(
        None, description="RFC3339 time the operator first created the job's pods.",
        json_schema_extra=_DATE_TIME,
    )
    completion_time: str | None = Field(
        None, description="RFC3339 time the job succeeded or failed.", json_schema_extra=_DATE_TIME
    )
    node_statuses: list[NodeStatus] = Field(
        default_factory=list, max_length=MAX_NODE_STATUSES,
        description=f"Per-node pod state, by index, at most {MAX_NODE_STATUSES} rows: every node when they fit, "
                    "else the nodes that are not fine first (failed, unhealthy or with a reason, then waiting: "
                    "pending or without a pod), then fine ones; nodeStatusesOmitted counts the nodes left out.",
        json_schema_extra=ATOMIC_LIST,
    )
    node_statuses_omitted: int = Field(0, ge=0, description="Nodes not listed in nodeStatuses (a job of more "
                                                             f"than {MAX_NODE_STATUSES} nodes).")
    node_counts: NodeCounts | None = Field(None, description="Nodes by state (nodeStatuses lists at most "
                                                             f"{MAX_NODE_STATUSES}).")
    attempt: int = Field(0, ge=0, description="Current gang attempt; pods carry it in their name (or, "
                                          "restarted in place, podsAttempt's, and it in an annotation).")
    pods_attempt: int | None = Field(
        None, ge=0, description="Set while the current attempt runs in the pods of an earlier one, restarted in "
                                "place (failurePolicy.restartStrategy InPlace): the attempt their names carry.")
    restart_strategy: RestartStrategy | None = Field(
        None, description="The restart strategy the job runs with: spec.failurePolicy.restartStrategy, or the one "
                          "chosen for it at its first reconcile when that is unset.")
    restarts: int = Field(0, ge=0, description="Counted gang restarts so far (against failurePolicy.maxRestarts; "
                                               "uncountedRestarts has the others).")
    resumed_from: str | None = Field(
        None, max_length=MAX_PATH_LENGTH,
        description="Checkpoint path the current attempt resumed from (MULTINODE_RESUME_FROM); never pruned.",
    )
    checkpoints: CheckpointsStatus | None = Field(
        None, description="What the checkpoint mirror reports; written only by the job's mirror pod."
    )
    checkpoint_request: CheckpointRequestStatus | None = Field(
        None, description="The last checkpoint asked of the trainer (a node cordoned, `multinode checkpoint`) "
                          "and whether it was mirrored in time.")
    resumed_by: list[ResumedByStatus] = Field(
        default_factory=list, max_length=MAX_RESUMED_BY,
        description="This job's mirrored checkpoints that other jobs of the namespace (resumeFrom.trainingJob "
                    "names this one) resumed their running attempt from, one entry per checkpoint; the mirror "
                    f"neither prunes nor replaces them. At most {MAX_RESUMED_BY}: while the list is full the mirror "
                    "prunes nothing.")
    uncounted_restarts: int = Field(0, ge=0, description="Gang restarts that did not count (node loss, "
                                                          "disruptions, resume after suspend).")
    restart_history: list[RestartRecord] = Field(default_factory=list, max_length=MAX_RESTART_HISTORY,
                                                 description="The last restarts, oldest first.")
    next_attempt_time: str | None = Field(None, description="While Restarting: when the next attempt may "
                                                            "start (backoff).", json_schema_extra=_DATE_TIME)
    attempt_start_time: str | None = Field(None, description="When the current attempt's pods were created.",
                                           json_schema_extra=_DATE_TIME)
    attempt_scheduled_time: str | None = Field(
        None, description="When the operator first saw a pod of the current attempt bound to a node: "
                          "spec.startupTimeoutSeconds counts from here.", json_schema_extra=_DATE_TIME)
    image_digest: str | None = Field(None, max_length=1024, description="image@sha256:... the first pod ran; "
                                                                        "later pods use it.")
    topology_domain: str | None = Field(None, max_length=63, description="Value of topology.sameDomainLabel "
                                                                         "the current attempt runs in.")
    progress: ProgressStatus | None = Field(None, description="Training progress of the current attempt, as its "
                                                              "progress source reports it.")
    goodput: GoodputStatus | None = Field(None, description="Seconds productive and lost, by cause, over every "
                                                            "attempt (docs/operations.md#goodput).")
    excluded_nodes: list[ExcludedNode] = Field(
        default_factory=list, max_length=MAX_EXCLUDED_NODES,
        description="Nodes new attempts' pods stay off (a required node affinity), newest last, until each "
                    "entry's time.", json_schema_extra=ATOMIC_LIST)
    scheduling: SchedulingStatus | None = Field(None, description="How the current attempt is gang-scheduled.")
    spares: SpareCounts | None = Field(None, description="The job's hot spares (spec.spareNodes).")
    current_nodes: int | None = Field(None, ge=0, description="Nodes training now: the running pods of the "
                                                              "attempt, the shed left out (spec.elastic).")
    elastic: ElasticStatus | None = Field(None, description="Nodes an elastic job goes on without, and its "
                                                            "resizes (spec.elastic).")

    @property
    def attempt_of_pods(self) -> int:
        """The attempt the current attempt's pods were created for (their names and labels carry it): the
        current one, or podsAttempt while they run it restarted in place."""
        return self.pods_attempt if self.pods_attempt is not None else self.attempt

    @field_validator("conditions")
    @classmethod
    def _one_condition_per_type(cls, conditions: list[Condition]) -> list[Condition]:
        """The last of each type, in first-seen order: the list is atomic, so the server no longer refuses a
        second entry of a type that another writer of the status put there, and the operator writes back what
        it read."""
        last = {c.type: c for c in conditions}
        return list(last.values()) if len(last) < len(conditions) else conditions
