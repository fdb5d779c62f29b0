"""Builders for tests of code that uses multinode, and of multinode itself (like kopf.testing).

- `training_job` / `stored_job`: a TrainingJob as a user applies it (a dict) and as the operator reads it
  back (the model);
- `full_job`: a TrainingJob with every spec and status field set, as the apiserver stores it;
- `observed_pod`, `observed_mirror`, `checkpointed_job`: the observed state the planner takes;
  `seen_integrations`: the integrations (a gang scheduler, Kueue) as the planner sees them;
- `trainer`, `preflight`, `node_env`, ...: readers of rendered pod manifests.
- `multinode.testing.mirror_chaos`: a randomized checkpoint writer that races a running Mirror (imported by
  its own name: the tests and tools/bench/mirror_chaos.py run it).

Pure: no cluster, no Kubernetes client.
"""

from multinode.testing.fullest import full_job
from multinode.testing.jobs import COMMAND, IMAGE, stored_job, training_job
from multinode.testing.manifests import (
    container_env, node_env, preflight, preflight_env, trainer, trainer_container_env,
)
from multinode.testing.integrations import seen_integrations
from multinode.testing.observed import checkpointed_job, observed_mirror, observed_pod, observed_spare

__all__ = [
    "COMMAND", "IMAGE", "checkpointed_job", "container_env", "full_job", "node_env", "observed_mirror",
    "observed_pod", "observed_spare", "preflight", "preflight_env", "seen_integrations", "stored_job", "trainer",
    "trainer_container_env", "training_job",
]
