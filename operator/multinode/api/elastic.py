"""spec.elastic and status.elastic: a job that trains on fewer nodes after a loss and grows back
(docs/operations.md#elastic-jobs).

numNodes stays the job's full size: the pods the operator keeps, one per index. `elastic.minNodes` is how few
may train; `elastic.maxNodes`, when given (torchrun's `--nnodes=min:max` spelling), must equal numNodes. A node
lost, excluded or preempted is shed: the rest go on (torchrun's c10d rendezvous on a store of its own, not on a
training node) while they are at least minNodes, and the shed index gets a new pod once the resize window has
passed, which joins when capacity is back.
"""

from __future__ import annotations

from pydantic import Field
from pydantic.config import JsonDict

from multinode.api.base import ApiModel, StatusModel

_DATE_TIME: JsonDict = {"format": "date-time"}

DEFAULT_BELOW_MIN_TIMEOUT_SECONDS = 600
DEFAULT_RESIZE_WINDOW_SECONDS = 30
# Nodes an elastic job may be shed of at once: one more loss restarts the gang, as without spec.elastic.
MAX_SHED_ROWS = 64


class ElasticSpec(ApiModel):
    """Train on fewer nodes after a loss, down to minNodes; grow back to numNodes when capacity returns."""

    min_nodes: int = Field(ge=1, description="The fewest nodes the job trains on. At most numNodes.")
    max_nodes: int | None = Field(None, ge=1, description="The most nodes it trains on: numNodes, which this "
                                                          "must equal when given (the pods are numNodes).")
    below_min_timeout_seconds: int = Field(
        DEFAULT_BELOW_MIN_TIMEOUT_SECONDS, ge=10, le=7 * 24 * 3600,
        description="Fewer than minNodes nodes left: the ones left wait in the rendezvous for capacity this long, "
                    "then the attempt fails with reason BelowMinNodes (a node-loss restart of the whole gang, "
                    "not counted by default).")
    resize_window_seconds: int = Field(
        DEFAULT_RESIZE_WINDOW_SECONDS, ge=0, le=3600,
        description="At most one grow per window: a shed node's new pod is made this long after the last "
                    "resize, so nodes that come back together join in one rendezvous round.")


class ShedNode(StatusModel):
    """A node index the job goes on without, until its new pod joins."""

    index: int = Field(ge=0, description="The node index.")
    pod: str = Field(max_length=253, description="The pod it lost.")
    uid: str | None = Field(None, max_length=64, description="That pod's UID (its new pod has the same name).")
    reason: str = Field(max_length=128, description="Why: NodeLost, Preempted, NodeUnhealthy, Straggler.")
    time: str = Field(description="RFC3339 time it was shed.", json_schema_extra=_DATE_TIME)


class ElasticStatus(StatusModel):
    """Where an elastic job stands (spec.elastic)."""

    shed: list[ShedNode] = Field(default_factory=list, max_length=MAX_SHED_ROWS,
                                 description="Indices trained without now, oldest first; at most "
                                             f"{MAX_SHED_ROWS} (one more loss restarts the gang).")
    resizes: int = Field(0, ge=0, description="Resizes (shrinks and grows) over the job's life.")
    last_resize_time: str | None = Field(None, description="RFC3339 time of the last resize.",
                                         json_schema_extra=_DATE_TIME)
    below_min_since: str | None = Field(None, description="Since when fewer than minNodes nodes train.",
                                        json_schema_extra=_DATE_TIME)
    store_uid: str | None = Field(None, max_length=64, description="The UID of the current attempt's rendezvous "
                                                                   "store pod, once placed: its loss fails the "
                                                                   "attempt.")
    store_shared: bool | None = Field(None, description="True: no machine without a training pod could take the "
                                                        "current attempt's rendezvous store, so it shares one; "
                                                        "losing that machine restarts the gang.")


def gang_min_count(num_nodes: int, elastic: ElasticSpec | None) -> int:
    """The pods a gang scheduler must place together: numNodes, or an elastic job's minNodes (its other pods,
    replacements of shed nodes among them, join when they fit)."""
    return elastic.min_nodes if elastic is not None else num_nodes
