"""Lifecycle of a TrainingJob: failure policy and gang restarts, suspend, deadlines, cleanup, same image
on every node, and placement in one topology domain.

Names follow the peers: JobSet's failurePolicy (maxRestarts, restartStrategy Recreate/BlockingRecreate,
rules with actions), Kubeflow's runPolicy (activeDeadlineSeconds, ttlSecondsAfterFinished, suspend,
cleanPodPolicy), and Kueue's suspend contract.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import ConfigDict, Field

from multinode.api.base import MAX_NAME_LENGTH, QUALIFIED_NAME_PATTERN, ApiModel
from multinode.api.cel import cel_rule
from multinode.api.conditions import FAILURE_REASONS

# Node loss: a short wait past the controller-manager's own 40 s grace period rides out a brief Ready flap
# (docs/operations.md#node-loss). Up to an hour, for users who would rather wait for a node's reboot.
DEFAULT_NODE_LOSS_TOLERATION_SECONDS = 5
MAX_NODE_LOSS_TOLERATION_SECONDS = 3600

# Exit codes are 0..255; ranges beyond that could never match.
ExitCode = Annotated[int, Field(ge=0, le=255)]


class FailureAction(StrEnum):
    """What a matching rule does with a failed attempt."""

    RESTART = "Restart"  # a gang restart that counts against maxRestarts
    RESTART_WITHOUT_COUNTING = "RestartWithoutCounting"  # host maintenance, node loss: not the user's fault
    FAIL_JOB = "FailJob"  # permanent: the job fails at once


class RestartStrategy(StrEnum):
    # JobSet's names. BlockingRecreate waits until every pod of the old attempt is gone before creating
    # the next one: no two pods share a hostname in DNS, and no GPU is held twice.
    BLOCKING_RECREATE = "BlockingRecreate"
    RECREATE = "Recreate"
    # A trainer that exits non-zero on a healthy node restarts with every container of its pod in place
    # (container restart rules, RestartAllContainers); its peers' pods follow as their trainers exit. Pods
    # keep their UIDs and nodes; anything else (a failed pod, a lost node) recreates as Recreate does.
    IN_PLACE = "InPlace"


class CleanPodPolicy(StrEnum):
    """Which pods a finished job deletes (Kubeflow's names)."""

    RUNNING = "Running"  # pods still pending or running; finished pods stay for their logs
    ALL = "All"
    NONE = "None"


class MismatchAction(StrEnum):
    FAIL_ATTEMPT = "FailAttempt"  # a failure with reason ImageDigestMismatch; the failure policy decides
    REPORT = "Report"  # a condition only


class ExitCodeRange(ApiModel):
    min: ExitCode = Field(description="Lowest exit code of the range.")
    max: ExitCode = Field(description="Highest exit code of the range (inclusive).")


class FailureRule(ApiModel):
    """Matches a failure when every matcher it sets matches; rules are tried in order, first match wins."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        cel_rule("has(self.onExitCodes) || has(self.onReasons) || has(self.onNodeLoss)",
                 "spec.failurePolicy.rules: each rule sets at least one of onExitCodes, onReasons and onNodeLoss"),
    ]})

    action: FailureAction = Field(description="Restart, RestartWithoutCounting or FailJob.")
    on_exit_codes: list[ExitCodeRange] | None = Field(
        None, min_length=1, max_length=32,
        description="Trainer exit codes, as inclusive ranges: [{min: 1, max: 127}] or [{min: 3, max: 3}].")
    on_reasons: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(
        None, min_length=1, max_length=32,
        description="Reasons: the container's (OOMKilled, Error), the pod's (Evicted), a disruption's "
                    "(DeletionByTaintManager, EvictionByEvictionAPI, PreemptionByScheduler), or the attempt "
                    f"failure's own ({', '.join(FAILURE_REASONS)}).")
    on_node_loss: bool | None = Field(
        None, description="True matches pods that were deleted or disrupted (DisruptionTarget, node NotReady, "
                          "eviction) instead of exiting.")


class Backoff(ApiModel):
    initial_seconds: int = Field(5, ge=0, le=3600, description="Delay before the first restart.")
    max_seconds: int = Field(300, ge=0, le=86400, description="Cap of the delay, which doubles per restart.")


class FailurePolicy(ApiModel):
    max_restarts: int = Field(3, ge=0, le=1000,
                              description="Counted gang restarts allowed before the job fails.")
    restart_strategy: RestartStrategy | None = Field(
        None,
        description="InPlace, BlockingRecreate or Recreate. InPlace: a trainer that exits with a code no rule "
                    "names restarts the gang in the same pods (Kubernetes 1.36's RestartAllContainers; "
                    "docs/operations.md#in-place-restarts); any other failure recreates, as BlockingRecreate. "
                    "Unset: InPlace where the cluster supports it (every Ready node that fits the job declares "
                    "RestartAllContainersOnContainerExits), else BlockingRecreate; an elastic job's is "
                    "BlockingRecreate, and a job with spareNodes InPlace. Chosen once, at the job's first "
                    "reconcile, and kept in status.restartStrategy.")
    backoff: Backoff = Field(default_factory=Backoff, description="Exponential backoff between attempts.",
                             json_schema_extra={"default": {}})
    node_loss_toleration_seconds: int = Field(
        DEFAULT_NODE_LOSS_TOLERATION_SECONDS, ge=0, le=MAX_NODE_LOSS_TOLERATION_SECONDS,
        description="How long a node pod stays on a node that is NotReady or unreachable before the gang "
                    "restarts elsewhere (not counted). Set as the tolerationSeconds of the "
                    "node.kubernetes.io/not-ready and unreachable NoExecute tolerations of every node pod "
                    "(Kubernetes' default is 300), and the operator restarts the gang when a node's Ready "
                    "condition has been False or Unknown this long. A podTemplate toleration for either key "
                    "wins for that key.")
    rules: list[FailureRule] | None = Field(
        None, max_length=32,
        description="Tried in order before the defaults. Defaults: node loss and disruptions restart without "
                    "counting; any other failure restarts, counted.")


class ImageConsistency(ApiModel):
    """Every node runs the same code: the image digest the first pod ran is pinned for later attempts."""

    pin_digest: bool = Field(True, description="Later attempts use the digest (image@sha256:...) the first "
                                               "pod reported, not the tag.")
    on_mismatch: MismatchAction = Field(MismatchAction.FAIL_ATTEMPT,
                                        description="Pods of one attempt running different digests: FailAttempt (a "
                                         "failure with reason ImageDigestMismatch, handled by the failure "
                                         "policy) or Report (a condition only).")


class Topology(ApiModel):
    """Keep every node of an attempt in one topology domain (an IB block, a zone)."""

    same_domain_label: str = Field(
        min_length=1, max_length=MAX_NAME_LENGTH, pattern=QUALIFIED_NAME_PATTERN,
        description="Node label whose value is the domain, e.g. network.topology.nvidia.com/block or "
                    "topology.kubernetes.io/zone. The domain is chosen when an attempt starts (the one with "
                    "the most matching Ready nodes) and set as a node selector; no pod affinity is used. With the "
                    "native gang (status.scheduling.gang PodGroup) it is the PodGroup's topology constraint "
                    "instead, and the scheduler picks the domain.")


class PodGroup(ApiModel):
    """Labels and annotations gang schedulers (coscheduling, Volcano) read."""

    min_member: int | None = Field(None, ge=1, description="Pods that must be placeable together; default "
                                                           "numNodes.")
