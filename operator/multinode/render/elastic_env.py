"""An elastic job's torchrun flags (spec.elastic): what its pods share in the attempt's ConfigMap, and where
its rendezvous store listens (render/rendezvous_store.py)."""

from __future__ import annotations

from multinode.api import TrainingJob
from multinode.api.constants import EnvName, dns_name, rendezvous_store_hostname
from multinode.render.names import job_identity, service_name

# torchrun's agent restarts its workers at every resize and after every worker failure (a peer lost takes the
# workers' collectives down): these count against --max-restarts. A trainer that keeps failing still ends:
# the agent exits and the pod fails (a counted gang restart, as in any job).
ELASTIC_MAX_RESTARTS = 100
# After minNodes joined, how long a round waits for more: short, so a shrink resumes quickly; nodes that come
# back together still join one round (their pods are made together, elastic.resizeWindowSeconds).
LAST_CALL_TIMEOUT_SECONDS = 5
CLOSE_TIMEOUT_SECONDS = 30
# A node gone without a word is out of the rendezvous after KEEP_ALIVE_INTERVAL_SECONDS x KEEP_ALIVE_MAX_ATTEMPTS
# missed heartbeats (torch's defaults, 5 x 3, made a shrink take 27 s against 18 s, measured on loopback).
KEEP_ALIVE_INTERVAL_SECONDS = 2
KEEP_ALIVE_MAX_ATTEMPTS = 3
# The operator decides when fewer than minNodes is too long (elastic.belowMinTimeoutSeconds); torchrun's own
# join timeout comes after, so an agent never gives up first.
JOIN_TIMEOUT_MARGIN_SECONDS = 120


def store_address(job: TrainingJob) -> str:
    identity = job_identity(job)
    return dns_name(rendezvous_store_hostname(identity.name), service_name(identity.name), identity.namespace)


def elastic_attempt_env(job: TrainingJob, rdzv_id: str, port: int) -> list[tuple[str, object]]:
    """What an elastic job's pods share (the attempt's ConfigMap): torchrun's elastic flags. The store listens
    on the attempt's rendezvous port (a store of an earlier attempt, still going, on another: the fence)."""
    elastic = job.spec.elastic
    if elastic is None:
        return []
    conf = (f"is_host=false,join_timeout={elastic.below_min_timeout_seconds + JOIN_TIMEOUT_MARGIN_SECONDS},"
            f"last_call_timeout={LAST_CALL_TIMEOUT_SECONDS},close_timeout={CLOSE_TIMEOUT_SECONDS},"
            f"keep_alive_interval={KEEP_ALIVE_INTERVAL_SECONDS},keep_alive_max_attempt={KEEP_ALIVE_MAX_ATTEMPTS}")
    return [
        (EnvName.PET_NNODES, f"{elastic.min_nodes}:{job.spec.num_nodes}"),
        (EnvName.PET_RDZV_BACKEND, "c10d"),
        (EnvName.PET_RDZV_ENDPOINT, f"{store_address(job)}:{port}"),
        (EnvName.PET_RDZV_ID, rdzv_id),
        (EnvName.PET_RDZV_CONF, conf),
        (EnvName.PET_MAX_RESTARTS, ELASTIC_MAX_RESTARTS),
        (EnvName.TORCH_DISABLE_SHARE_RDZV_TCP_STORE, 1),
        (EnvName.MULTINODE_MIN_NODES, elastic.min_nodes),
    ]
