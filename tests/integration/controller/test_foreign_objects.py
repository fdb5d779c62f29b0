"""A co-tenant of the job's namespace makes, before the operator does, the objects the job's next attempt will
need under their predictable names: the attempt's ConfigMap (with its own MASTER_ADDR and LD_PRELOAD) and a
pod with the job's labels and the name of rank 0's next pod. The job uses neither, says which object is in
the way (ForeignObject), and goes on with its own once they are gone (reconcile/ownership.py)."""

from __future__ import annotations

from kubernetes import client

from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from multinode.api import LABEL_ATTEMPT, LABEL_JOB_NAME, LABEL_NODE_INDEX, read_stored_job
from multinode.api.constants import EnvName
from multinode.render.attempt_env import attempt_env_name
from tests.support import jobs
from tests.support.jobs import EXIT_CODE, FINISH_AFTER

NAME = "victim"


def running_condition(custom: client.CustomObjectsApi, ns: str) -> dict:
    return jobs.condition(jobs.get_job(custom, ns, NAME), "Running") or {}


def says_foreign(custom: client.CustomObjectsApi, ns: str, what: str) -> dict | None:
    running = running_condition(custom, ns)
    return running if running.get("reason") == "ForeignObject" and what in running.get("message", "") else None


def poke(custom: client.CustomObjectsApi, ns: str, n: int) -> None:
    """A change to the job, so it is reconciled now rather than at its next retry (the operator does not watch
    ConfigMaps: a deleted one is seen at the next reconcile)."""
    custom.patch_namespaced_custom_object("multinode.dev", "v1alpha1", ns, "trainingjobs", NAME,
                                          {"metadata": {"annotations": {"test.multinode.dev/poke": str(n)}}})


def test_a_co_tenants_configmap_and_pod_under_the_next_attempts_names_are_not_used_and_the_job_says_why(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, kubeconfig: str, job_namespace: str
) -> None:
    ns = job_namespace
    jobs.apply(kubeconfig, ns, training_job(NAME, 2, gpus=0, failurePolicy={"backoff": {"initialSeconds": 0}}))
    stored = jobs.wait_phase(custom, ns, NAME, "Running")
    uid = stored["metadata"]["uid"]
    job, _ = read_stored_job(stored)
    env_name = attempt_env_name(job, 1)

    # The co-tenant (anyone who may create ConfigMaps and pods here) prepares attempt 1.
    core.create_namespaced_config_map(ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=env_name, labels={LABEL_JOB_NAME: NAME, LABEL_ATTEMPT: "1"}),
        data={EnvName.MASTER_ADDR: "attacker.example", "LD_PRELOAD": "/cache/evil.so"}))
    own = core.read_namespaced_pod(f"{NAME}-0-a0", ns)
    own.metadata = client.V1ObjectMeta(
        name=f"{NAME}-0-a1", labels={**own.metadata.labels, LABEL_ATTEMPT: "1", LABEL_NODE_INDEX: "0"})
    own.spec.node_name, own.status = None, None
    core.create_namespaced_pod(ns, own)

    # Attempt 0 fails: the gang restarts as attempt 1, whose ConfigMap name is taken.
    core.patch_namespaced_pod(f"{NAME}-1-a0", ns, {"metadata": {"annotations": {FINISH_AFTER: "0s", EXIT_CODE: "1"}}})
    running = wait_for(lambda: says_foreign(custom, ns, f"ConfigMap {ns}/{env_name}"), timeout=60,
                       what="the job naming the ConfigMap in its way")
    assert running["status"] == "False" and "is not this job's (controlled by nothing)" in running["message"]
    assert jobs.get_job(custom, ns, NAME)["status"]["attempt"] == 1
    attempt_1 = [p.metadata.name for p in jobs.job_pods(core, ns, NAME) if p.metadata.labels[LABEL_ATTEMPT] == "1"]
    assert attempt_1 == [f"{NAME}-0-a1"], "no pod of the job may start with the co-tenant's environment"
    untouched = core.read_namespaced_config_map(env_name, ns)
    assert untouched.data["LD_PRELOAD"] == "/cache/evil.so" and not untouched.metadata.owner_references

    # The ConfigMap goes: the job makes its own, then finds rank 0's pod name taken by the co-tenant's pod.
    core.delete_namespaced_config_map(env_name, ns)
    poke(custom, ns, 1)
    wait_for(lambda: says_foreign(custom, ns, f"Pod {ns}/{NAME}-0-a1"), timeout=90,
             what="the job naming the pod in its way")
    env = core.read_namespaced_config_map(env_name, ns)
    assert [r.uid for r in env.metadata.owner_references] == [uid]
    assert "LD_PRELOAD" not in env.data and env.data[EnvName.MASTER_ADDR] != "attacker.example"
    assert jobs.get_job(custom, ns, NAME)["status"].get("readyNodes", 0) < 2, "the co-tenant's pod is no rank"

    # The pod goes too: attempt 1 runs with the job's own pods only.
    core.delete_namespaced_pod(f"{NAME}-0-a1", ns, grace_period_seconds=0)
    poke(custom, ns, 2)

    def running_on_its_own() -> bool:
        job_now = jobs.get_job(custom, ns, NAME)
        pods = [p for p in jobs.job_pods(core, ns, NAME) if p.metadata.labels[LABEL_ATTEMPT] == "1"]
        return (job_now["status"].get("phase") == "Running" and len(pods) == 2
                and all([r.uid for r in p.metadata.owner_references or []] == [uid] for p in pods))

    wait_for(running_on_its_own, timeout=120, what="attempt 1 Running with the job's own pods")
