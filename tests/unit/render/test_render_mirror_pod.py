"""The mirror pod runs in the job's pool: the job's node selector and tolerations apply to it; but it
leaves a lost node after the job's nodeLossTolerationSeconds, and a probe restarts it when it is stuck."""

from __future__ import annotations

from multinode.api.constants import MIRROR_HEALTH_PATH, MIRROR_STUCK_AFTER_SECONDS, TAINT_NODE_UNREACHABLE
from multinode.render.mirror_pod import render_mirror_pod
from multinode.render.tolerations import tolerated_seconds
from multinode.testing import stored_job

STORAGE = {"cache": {"claimName": "team-cache"}, "checkpointing": {"claimName": "ckpt"}}


def test_the_mirror_pod_takes_the_jobs_node_selector_and_tolerations() -> None:
    toleration = {"key": "pool", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    job = stored_job(**STORAGE, podTemplate={"nodeSelector": {"pool": "gpu"}, "tolerations": [toleration]})
    spec = render_mirror_pod(job)["spec"]
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert toleration in spec["tolerations"]


def test_a_job_without_placement_leaves_the_mirror_pod_free() -> None:
    spec = render_mirror_pod(stored_job(**STORAGE))["spec"]
    assert "nodeSelector" not in spec
    assert {t["key"] for t in spec["tolerations"]} == {"node.kubernetes.io/not-ready", TAINT_NODE_UNREACHABLE}


def test_the_mirror_leaves_a_lost_node_whatever_the_trainers_tolerate() -> None:
    """A user who tolerates node loss for ever (an empty key with Exists: every taint) keeps that for the
    trainers; the mirror's own node-loss tolerations come first, and the first match decides."""
    forever = {"operator": "Exists"}
    job = stored_job(**STORAGE, podTemplate={"tolerations": [forever]}, failurePolicy={"nodeLossTolerationSeconds": 40})
    tolerations = render_mirror_pod(job)["spec"]["tolerations"]

    assert tolerated_seconds(tolerations, TAINT_NODE_UNREACHABLE) == 40
    assert forever in tolerations   # still schedulable on the pool's tainted nodes


def test_a_stuck_mirror_is_restarted_by_its_liveness_probe() -> None:
    container = render_mirror_pod(stored_job(**STORAGE))["spec"]["containers"][0]
    probe = container["livenessProbe"]
    assert probe["httpGet"] == {"path": MIRROR_HEALTH_PATH, "port": "metrics"}
    assert container["args"][container["args"].index("--stuck-after") + 1] == str(MIRROR_STUCK_AFTER_SECONDS)


def test_the_mirror_is_told_the_jobs_world_size_for_per_rank_layouts() -> None:
    job = stored_job(3, **STORAGE, numProcPerNode=4)
    args = render_mirror_pod(job)["spec"]["containers"][0]["args"]
    assert args[args.index("--world-size") + 1] == "12"
