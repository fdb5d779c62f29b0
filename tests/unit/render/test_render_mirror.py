"""The mirror pod runs in the job's pool: the job's node selector and tolerations apply to it."""

from __future__ import annotations

from multinode.render.mirror import render_mirror_pod
from localcluster.harness.trainingjobs import stored_job

STORAGE = {"cache": {"claimName": "team-cache"}, "checkpointing": {"claimName": "ckpt"}}


def test_the_mirror_pod_takes_the_jobs_node_selector_and_tolerations() -> None:
    toleration = {"key": "pool", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    job = stored_job(**STORAGE, podTemplate={"nodeSelector": {"pool": "gpu"}, "tolerations": [toleration]})
    spec = render_mirror_pod(job)["spec"]
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert spec["tolerations"] == [toleration]


def test_a_job_without_placement_leaves_the_mirror_pod_free() -> None:
    spec = render_mirror_pod(stored_job(**STORAGE))["spec"]
    assert "nodeSelector" not in spec and "tolerations" not in spec


def test_the_mirror_is_told_the_jobs_world_size_for_per_rank_layouts() -> None:
    job = stored_job(3, **STORAGE, numProcPerNode=4)
    args = render_mirror_pod(job)["spec"]["containers"][0]["args"]
    assert args[args.index("--world-size") + 1] == "12"
