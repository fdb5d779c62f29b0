"""Every condition type and reason the operator writes, and the reasons of the Events it posts.

The one place these words are spelled: the planner, the controller and the mirror use the members, and
tests/unit/docs checks that the docs and the Argo CD health check name only these and document all of
them. They are StrEnums, so they compare equal to, and serialise as, their plain strings.
"""

from __future__ import annotations

from enum import StrEnum


class ConditionType(StrEnum):
    CREATED = "Created"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    IMAGE_CONSISTENT = "ImageConsistent"
    # False while training has ended and the mirror's final sync runs; True once it is done.
    CHECKPOINTS_SYNCED = "CheckpointsSynced"
    # With spec.checkpointing: whether the mirror pod runs, and if not what stops it (an image that cannot
    # be pulled names the image and the chart values that set it).
    CHECKPOINT_MIRROR = "CheckpointMirror"
    # With spec.hangDetection: whether the ranks make progress, and whether some are much slower.
    PROGRESSING = "Progressing"
    STRAGGLERS = "Stragglers"
    # Whether the attempt's pods were placed together (status.scheduling says by which mechanism).
    GANG_SCHEDULED = "GangScheduled"
    # With the label kueue.x-k8s.io/queue-name: whether Kueue admitted the job's Workload.
    KUEUE_ADMITTED = "KueueAdmitted"
    # With failurePolicy.restartStrategy InPlace: whether the cluster kept the pods' container restart rules
    # (False: it dropped them, and every failure recreates the gang).
    IN_PLACE_RESTARTS = "InPlaceRestarts"
    # What kstatus reads (Flux's health checks): derived from the phase and the conditions above, last
    # (reconcile/kstatus.py). Ready: nothing left to wait for; Reconciling: on its way; Stalled: failed.
    READY = "Ready"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"


class Reason(StrEnum):
    # Created
    PODS_CREATED = "PodsCreated"
    CREATING_PODS = "CreatingPods"
    # Pending: why the pods are not all placed
    NO_TOPOLOGY_DOMAIN = "NoTopologyDomain"
    UNSCHEDULABLE = "Unschedulable"
    WAITING_FOR_SCHEDULING = "WaitingForScheduling"
    # Unschedulable, for a cause the nodes show (reconcile/capacity.py): no node advertises the GPU or RDMA
    # resource at all; fewer eligible nodes than numNodes (one pod per node).
    NO_NODE_OFFERS_RESOURCE = "NoNodeOffersResource"
    NOT_ENOUGH_NODES = "NotEnoughNodes"
    # Gang scheduling: the native PodGroup does not fit; all pods bound together; without the API, pods
    # unschedulable (no partial gang kept for long); a partial gang released to free what it held.
    GANG_UNSCHEDULABLE = "GangUnschedulable"
    GANG_PLACED = "GangPlaced"
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    PARTIAL_GANG_RELEASED = "PartialGangReleased"
    # spec.scheduling names Volcano or coscheduling, and the apiserver serves no PodGroup of that kind (its
    # CRD is not installed): nothing is created until it is.
    GANG_SCHEDULER_NOT_INSTALLED = "GangSchedulerNotInstalled"
    # KueueAdmitted: the job's Workload waits in its queue; Kueue admitted it (the job runs); Kueue evicted or
    # preempted it (the job is suspended again and requeued); the apiserver serves no Kueue Workload.
    QUEUED_IN_KUEUE = "QueuedInKueue"
    ADMITTED_BY_KUEUE = "AdmittedByKueue"
    EVICTED_BY_KUEUE = "EvictedByKueue"
    KUEUE_NOT_INSTALLED = "KueueNotInstalled"
    # Starting: why the pods are not all running
    IMAGE_PULL_FAILING = "ImagePullFailing"
    CRASH_LOOPING = "CrashLooping"
    CONTAINER_CONFIG_ERROR = "ContainerConfigError"
    WAITING_FOR_PEER_DNS = "WaitingForPeerDNS"
    PODS_STARTING = "PodsStarting"
    ALL_NODES_RUNNING = "AllNodesRunning"
    # Why an attempt failed
    POD_FAILED = "PodFailed"
    PREFLIGHT_FAILED = "PreflightFailed"
    # A node's health check failed (spec.healthCheck): the node is excluded, the gang restarts elsewhere.
    NODE_UNHEALTHY = "NodeUnhealthy"
    NODE_LOST = "NodeLost"
    # The scheduler took the gang's nodes for a higher-priority gang (DisruptionTarget PreemptionByScheduler).
    PREEMPTED = "Preempted"
    STARTUP_TIMEOUT = "StartupTimeout"
    IMAGE_DIGEST_MISMATCH = "ImageDigestMismatch"
    # No rank made progress for too long (progress and hang detection)
    HUNG = "Hung"
    # A reported straggler's node is excluded and the gang restarts without it (stragglers.action Exclude);
    # also the reason of its status.excludedNodes entry.
    STRAGGLER = "Straggler"
    # Restarting
    RESTARTING = "Restarting"
    WAITING_FOR_OLD_PODS = "WaitingForOldPods"
    BACKOFF = "Backoff"
    # failurePolicy.restartStrategy InPlace: the gang's pods restart in place into the new attempt; and when
    # one does not within IN_PLACE_TIMEOUT_SECONDS (or one is gone), the gang is recreated instead.
    RESTARTING_IN_PLACE = "RestartingInPlace"
    IN_PLACE_RESTART_ABANDONED = "InPlaceRestartAbandoned"
    # InPlaceRestarts: the pods carry their restart rules, or the apiserver dropped them.
    RESTART_RULES_KEPT = "RestartRulesKept"
    RESTART_RULES_DROPPED = "RestartRulesDropped"
    # failurePolicy.restartStrategy unset: InPlaceRestarts False when some Ready node that fits the job does
    # not declare the kubelet's feature, so the job recreates (restart_strategy.py).
    NODES_LACK_IN_PLACE_RESTARTS = "NodesLackInPlaceRestarts"
    POD_FORCE_DELETED = "PodForceDeleted"
    # spec.spareNodes: a spare took a lost node's rank (an Event); a spare that failed or lost its node was
    # replaced (an Event).
    SPARE_TOOK_RANK = "SpareTookRank"
    SPARE_REPLACED = "SpareReplaced"
    # spec.elastic: a node shed (the rest train on) or back (the job grows): an Event each, and Running's
    # reason while it trains without some nodes; below minNodes it waits (Running False), then fails the
    # attempt; the rendezvous store's pod failed or vanished; no machine without a training pod could take the
    # store, so it shares one (an Event).
    ELASTIC_SHRUNK = "ElasticShrunk"
    ELASTIC_GREW = "ElasticGrew"
    RUNNING_REDUCED = "RunningReduced"
    BELOW_MIN_NODES = "BelowMinNodes"
    RENDEZVOUS_LOST = "RendezvousLost"
    RENDEZVOUS_STORE_SHARED = "RendezvousStoreShared"
    # Suspend
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    # Finished
    ALL_NODES_SUCCEEDED = "AllNodesSucceeded"
    LEADER_SUCCEEDED = "LeaderSucceeded"
    RESTART_LIMIT_EXCEEDED = "RestartLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    JOB_FINISHED = "JobFinished"
    # Refused by the apiserver, or not a valid object
    POD_CREATION_FORBIDDEN = "PodCreationForbidden"
    POD_CREATION_FAILED = "PodCreationFailed"
    INVALID_SPEC = "InvalidSpec"
    # An object under a name the job needs exists and is not the job's (another owner, or none): not used.
    FOREIGN_OBJECT = "ForeignObject"
    # ImageConsistent
    SAME_DIGEST = "SameDigest"
    # CheckpointsSynced, and Running while the job waits for it
    FINAL_SYNC = "FinalSync"
    FINAL_SYNC_REQUESTED = "FinalSyncRequested"
    FINAL_SYNC_WAITING_FOR_PODS = "FinalSyncWaitingForPods"   # training ended; a pod may still write
    FINAL_SYNC_DONE = "FinalSyncDone"
    FINAL_SYNC_TIMED_OUT = "FinalSyncTimedOut"
    # CheckpointMirror (ImagePullFailing and ContainerConfigError above are also its False reasons)
    MIRROR_RUNNING = "MirrorRunning"
    MIRROR_STARTING = "MirrorStarting"
    # Progressing (Hung above is its False reason), Stragglers
    PROGRESS_SEEN = "ProgressSeen"
    WAITING_FOR_PROGRESS = "WaitingForProgress"
    STRAGGLERS_DETECTED = "StragglersDetected"
    NO_STRAGGLERS = "NoStragglers"
    # A checkpoint asked of the trainer (status.checkpointRequest): why, and how it ended. A node cordoned
    # (kubectl drain, node repair) moves the gang off it after the checkpoint, or after the wait: NodeDrained.
    NODE_CORDONED = "NodeCordoned"
    USER_REQUESTED = "UserRequested"
    CHECKPOINT_REQUESTED = "CheckpointRequested"
    CHECKPOINT_MIRRORED = "CheckpointMirrored"
    CHECKPOINT_REQUEST_TIMED_OUT = "CheckpointRequestTimedOut"
    NODE_DRAINED = "NodeDrained"


# The reasons an attempt's failure carries (reconcile/failures.py's Failure): what failurePolicy.rules[].onReasons
# matches besides the pod's and the container's own reasons, what status.restartHistory records and what
# multinode_restarts_total counts by. tests/unit/docs checks that every Failure the package makes has one of
# these and that the docs list them all.
FAILURE_REASONS: tuple[Reason, ...] = (
    Reason.POD_FAILED,
    Reason.PREFLIGHT_FAILED,
    Reason.NODE_UNHEALTHY,
    Reason.NODE_LOST,
    Reason.PREEMPTED,
    Reason.STARTUP_TIMEOUT,
    Reason.IMAGE_DIGEST_MISMATCH,
    Reason.HUNG,
    Reason.STRAGGLER,
    Reason.NODE_DRAINED,
    Reason.BELOW_MIN_NODES,
    Reason.RENDEZVOUS_LOST,
)
