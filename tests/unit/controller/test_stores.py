"""The typed stores (controller/stores.py): what each read returns, that it takes only the job's own objects,
and that the reads a reconcile makes are lookups, not walks of every job."""

from __future__ import annotations

from dataclasses import replace

from multinode.controller.stores import ByName, JobStore, Stores
from multinode.reconcile.ownership import OwnedName
from multinode.reconcile.placement import ObservedNode, observe_node
from multinode.testing import observed_mirror, observed_pod


def body(name: str, namespace: str = "ml", resume_from: str | None = None, **status: str) -> dict:
    spec = {"checkpointing": {"resumeFrom": {"trainingJob": resume_from}}} if resume_from else {}
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}/{name}"}, "spec": spec,
            "status": status}


def test_a_jobs_resumers_are_one_lookup_by_the_job_they_resume_from() -> None:
    jobs = JobStore()
    for job in (body("pretrain"), body("finetune", resume_from="pretrain"), body("eval", resume_from="pretrain"),
                body("other", resume_from="elsewhere"), body("loop", resume_from="loop"),
                body("theirs", namespace="team-b", resume_from="pretrain")):
        jobs.file(job)
    assert sorted(j["metadata"]["name"] for j in jobs.resumers_of("ml", "pretrain")) == ["eval", "finetune"]
    assert jobs.resumers_of("ml", "loop") == []  # a job resuming from itself is not its own resumer
    assert [j["metadata"]["name"] for j in jobs.resumers_of("team-b", "pretrain")] == ["theirs"]  # its namespace's
    assert sorted(jobs.keys()) == [("ml", n) for n in ("eval", "finetune", "loop", "other", "pretrain")] + [
        ("team-b", "theirs")]  # the resume-source keys are not jobs
    assert jobs.keys("team-b") == [("team-b", "theirs")]


def test_a_job_that_stops_resuming_leaves_its_sources_resumers() -> None:
    jobs = JobStore()
    jobs.file(body("finetune", resume_from="pretrain"))
    jobs.file(body("finetune"))  # its spec changed: the same uid, filed again
    assert jobs.resumers_of("ml", "pretrain") == []
    assert jobs.key_of("ml/finetune") == ("ml", "finetune") and jobs.holds("ml/finetune")
    jobs.remove("ml/finetune")
    assert jobs.get(("ml", "finetune")) is None and not jobs.holds("ml/finetune")


def test_pods_are_read_by_job_and_owner_mirrors_apart_and_jobs_by_node() -> None:
    stores = Stores()
    ours, stranger = observed_pod(0, node="n1", owner_uid="u"), observed_pod(1, node="n2", owner_uid="someone")
    stores.pods.put_pod("ml", ours)
    stores.pods.put_pod("ml", stranger)
    mirror = replace(observed_mirror(), node="n3", owner_uid="u")
    stores.pods.put_mirror("ml", mirror)
    job = ours.job_name
    assert stores.pods.of_job("ml", job, "u") == [ours]
    assert stores.pods.mirror_of("ml", job, "u") == mirror and stores.pods.mirror_of("ml", job, "x") is None
    assert stores.pods.on_node("n1") == stores.pods.on_node("n3") == {("ml", job)}
    assert stores.pods.on_node("n2") == {("ml", job)}  # a node's change reconciles the job; it judges ownership
    assert stores.pods.of_job("other", job, "u") == [] and stores.pods.on_node("n9") == set()


def test_nodes_are_read_one_by_name_or_all_at_once() -> None:
    nodes = ByName(observe_node)
    nodes.put("a", ObservedNode(name="a", ready=False))
    nodes.put("b", ObservedNode(name="b"))
    assert nodes.named("a") == ObservedNode(name="a", ready=False) and nodes.named("c") is None
    assert sorted(n.name for n in nodes.all()) == ["a", "b"]
    assert [(k, v.name) for k, v in nodes.keys_of({"metadata": {"name": "c"}}).items()] == [("c", "c")]


def test_a_jobs_objects_are_those_it_controls() -> None:
    stores = Stores()
    service = {"metadata": {"name": "llama", "namespace": "ml", "uid": "s",
                            "labels": {"multinode.dev/job-name": "llama"}}}
    stores.services.index.put("s", stores.services.keys_of(service))
    assert stores.services.of_job("ml", "llama", None) == [OwnedName("llama", None)]
    assert stores.services.of_job("ml", "llama", "u") == []  # not controlled by the job "u"
    assert stores.services.keys_of({"metadata": {"name": "x", "namespace": "ml"}}) == {}  # no job label
