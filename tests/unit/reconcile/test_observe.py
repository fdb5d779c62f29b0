from __future__ import annotations

from multinode.reconcile import observe_pod

LABELS = {"multinode.dev/job-name": "llama", "multinode.dev/node-index": "3", "multinode.dev/attempt": "1"}


def test_pods_without_our_labels_are_ignored() -> None:
    assert observe_pod({"metadata": {"name": "x", "labels": {"app": "other"}}}) is None
    assert observe_pod({"metadata": {"name": "x", "labels": {**LABELS, "multinode.dev/node-index": "-1"}}}) is None


def test_a_failed_trainer_reports_exit_code_and_reason() -> None:
    pod = observe_pod({
        "metadata": {"name": "llama-3-a1", "labels": LABELS},
        "spec": {"nodeName": "gpu-node-2"},
        "status": {"phase": "Failed", "containerStatuses": [
            {"name": "trainer", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]},
    })

    assert (pod.index, pod.attempt, pod.node, pod.phase) == (3, 1, "gpu-node-2", "Failed")
    assert (pod.exit_code, pod.reason) == (137, "OOMKilled")
    assert not pod.active


def test_a_failed_preflight_takes_precedence_and_keeps_its_message() -> None:
    pod = observe_pod({
        "metadata": {"name": "llama-3-a1", "labels": LABELS},
        "status": {"phase": "Failed", "initContainerStatuses": [{"name": "preflight", "state": {"terminated": {
            "exitCode": 1, "message": "PeerDNSUnresolved: 1/4 peers did not resolve within 300s: llama-0.llama.ml.svc"}}}]},
    })

    assert pod.reason == "PreflightFailed" and pod.exit_code == 1
    assert pod.message.startswith("PeerDNSUnresolved")


def test_unschedulable_and_terminating_are_read() -> None:
    pod = observe_pod({
        "metadata": {"name": "llama-3-a1", "labels": LABELS, "deletionTimestamp": "2026-11-20T12:00:00Z"},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/8 nodes are available"}]},
    })

    assert pod.unschedulable == "0/8 nodes are available"
    assert pod.terminating and not pod.active


def test_an_empty_resume_path_stored_without_value_still_counts_as_decided() -> None:
    def with_env(env):
        return observe_pod({"metadata": {"name": "llama-3-a1", "labels": LABELS},
                            "spec": {"containers": [{"name": "trainer", "env": env}]}})

    assert with_env([{"name": "MULTINODE_RESUME_FROM"}]).resume_from == ""
    assert with_env([{"name": "MULTINODE_RESUME_FROM", "value": "/c/x"}]).resume_from == "/c/x"
    assert with_env([]).resume_from is None


def test_the_trainers_start_time_is_read_for_hang_detection() -> None:
    def observed(state: dict) -> str | None:
        return observe_pod({"metadata": {"name": "llama-3-a1", "labels": LABELS}, "status": {
            "phase": "Running", "containerStatuses": [{"name": "trainer", "state": state}]}}).started_at

    assert observed({"running": {"startedAt": "2026-11-20T12:00:00Z"}}) == "2026-11-20T12:00:00Z"
    assert observed({"waiting": {"reason": "ContainerCreating"}}) is None
