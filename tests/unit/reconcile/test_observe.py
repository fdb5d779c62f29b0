from __future__ import annotations

from multinode.reconcile import observe_pod
from multinode.reconcile.observe import Wait, observe_mirror_pod

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
            "exitCode": 1,
            "message": "PeerDNSUnresolved: 1/4 peers did not resolve within 300s: llama-0.llama.ml.svc"}}}]},
    })

    assert pod.reason == "PreflightFailed" and pod.exit_code == 1
    assert pod.message.startswith("PeerDNSUnresolved")


def test_unschedulable_and_terminating_are_read() -> None:
    pod = observe_pod({
        "metadata": {"name": "llama-3-a1", "labels": LABELS, "deletionTimestamp": "2026-11-20T12:00:00Z"},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/8 nodes are available", "lastTransitionTime": "2026-11-20T11:59:50Z"}]},
    })

    assert pod.unschedulable == "0/8 nodes are available" and pod.unschedulable_since == "2026-11-20T11:59:50Z"
    assert pod.terminating and not pod.active


def test_an_empty_resume_path_stored_without_value_still_counts_as_decided() -> None:
    def with_env(env):
        return observe_pod({"metadata": {"name": "llama-3-a1", "labels": LABELS},
                            "spec": {"containers": [{"name": "trainer", "env": env}]}})

    assert with_env([{"name": "MULTINODE_RESUME_FROM"}]).resume_from == ""
    assert with_env([{"name": "MULTINODE_RESUME_FROM", "value": "/c/x"}]).resume_from == "/c/x"
    assert with_env([]).resume_from is None


def _preflight_ended(exit_code: int, message: str) -> dict:
    return {"metadata": {"name": "llama-3-a1", "labels": LABELS}, "spec": {"nodeName": "gpu-node-2"},
            "status": {"phase": "Failed" if exit_code else "Running", "initContainerStatuses": [
                {"name": "preflight", "state": {"terminated": {"exitCode": exit_code, "message": message}}}]}}


def test_a_failed_health_check_is_read_from_the_termination_message() -> None:
    from multinode.api.health_check import HealthStatus, health_message

    message = health_message(HealthStatus.FAILED, "GPUsNotVisible", "4 GPUs requested, fewer visible: 2 in X")
    pod = observe_pod(_preflight_ended(1, message))

    assert pod.unhealthy and pod.health.reason == "GPUsNotVisible"
    assert (pod.reason, pod.exit_code) == ("NodeUnhealthy", 1)
    assert pod.message == "GPUsNotVisible: 4 GPUs requested, fewer visible: 2 in X"


def test_a_passed_health_check_is_kept_once_the_trainer_runs() -> None:
    from multinode.api.health_check import HealthStatus, health_message

    pod = observe_pod(_preflight_ended(0, health_message(HealthStatus.PASSED, "Healthy", "8 GPUs visible")))

    assert pod.health is not None and pod.health.status == "Passed" and not pod.unhealthy
    assert pod.reason is None and pod.exit_code is None


def test_a_plain_or_broken_termination_message_holds_no_verdict() -> None:
    for message in ("PeerDNSUnresolved: 1/2 peers", '{"health": "Maybe"}', "{not json", '{"other": 1}'):
        pod = observe_pod(_preflight_ended(1, message))
        assert pod.health is None and pod.reason == "PreflightFailed", message
def test_the_trainers_start_time_is_read_for_hang_detection() -> None:
    def observed(state: dict) -> str | None:
        return observe_pod({"metadata": {"name": "llama-3-a1", "labels": LABELS}, "status": {
            "phase": "Running", "containerStatuses": [{"name": "trainer", "state": state}]}}).started_at

    assert observed({"running": {"startedAt": "2026-11-20T12:00:00Z"}}) == "2026-11-20T12:00:00Z"
    assert observed({"waiting": {"reason": "ContainerCreating"}}) is None


def test_the_collective_bandwidth_figures_reach_the_node_s_status_row_passed_or_failed() -> None:
    from multinode.api.health_check import BandwidthFigures, HealthStatus, health_message
    from multinode.reconcile.status_report import _row

    figures = BandwidthFigures(inbound_gbps=9.1, outbound_gbps=8.7, algbw_gbps=6.0, busbw_gbps=8.0)
    passed = observe_pod(_preflight_ended(0, health_message(HealthStatus.PASSED, "Healthy", "busbw 8", figures)))
    slow = BandwidthFigures(inbound_gbps=0.0098, outbound_gbps=0.0099)
    failed = observe_pod(_preflight_ended(1, health_message(HealthStatus.FAILED, "CollectiveBandwidthLow",
                                                            "both ring links of node 3 are below minGbps 1", slow)))

    assert _row(passed).health.model_dump(by_alias=True, exclude_none=True) == {
        "status": "Passed", "reason": "Healthy",
        "bandwidth": {"inboundGbps": 9.1, "outboundGbps": 8.7, "algbwGbps": 6.0, "busbwGbps": 8.0}}
    assert failed.unhealthy and (failed.reason, failed.health.bandwidth) == ("NodeUnhealthy", slow)
    assert failed.message == "CollectiveBandwidthLow: both ring links of node 3 are below minGbps 1"


def test_a_blocked_container_is_named_with_its_image_init_containers_first() -> None:
    raw = {"metadata": {"name": "llama-3-a1", "labels": LABELS}, "status": {
        "phase": "Pending",
        "initContainerStatuses": [{"name": "preflight", "image": "ghcr.io/multinode/operator:0.1.0",
                                   "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}],
        "containerStatuses": [{"name": "trainer", "image": "registry.example/train:1.0",
                               "state": {"waiting": {"reason": "PodInitializing"}}}]}}
    pod = observe_pod(raw)
    assert (pod.waiting_reason, pod.waiting_message, pod.waiting_container, pod.waiting_image) == (
        "ImagePullBackOff", "not found", "preflight", "ghcr.io/multinode/operator:0.1.0")
    mirror = observe_mirror_pod({"metadata": {"name": "llama-mirror", "labels": {"multinode.dev/mirror-of": "llama"}},
                                 "status": {"phase": "Pending", "containerStatuses": [
                                     {"name": "mirror", "image": "ghcr.io/multinode/operator:0.1.0",
                                      "state": {"waiting": {"reason": "ErrImagePull"}}}]}})
    assert mirror is not None
    assert mirror.waiting == Wait("ErrImagePull", None, "mirror", "ghcr.io/multinode/operator:0.1.0")


def test_an_in_place_pod_reads_its_attempt_resume_path_and_restarts_from_its_annotations() -> None:
    # As the kubelet reports a pod restarted in place (RestartAllContainers): the trainer's restart counted, its
    # last state a removal without an exit code.
    pod = observe_pod({
        "metadata": {"name": "llama-3-a1", "labels": LABELS, "annotations": {
            "multinode.dev/attempt": "4", "multinode.dev/resume-from": "/ckpt/step-7",
            "multinode.dev/trainer-restarts": "2"}},
        "spec": {"containers": [{"name": "trainer", "env": [{"name": "MULTINODE_RESUME_FROM", "valueFrom": {}}],
                                 "restartPolicyRules": [{"action": "RestartAllContainers"}]}]},
        "status": {"phase": "Pending", "containerStatuses": [{
            "name": "trainer", "restartCount": 3, "state": {"waiting": {"reason": "PodInitializing"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "RestartingAllContainers"}}}]},
    })
    assert (pod.attempt, pod.in_place_attempt, pod.runs_attempt) == (1, 4, 4)
    assert (pod.trainer_restarts, pod.in_place_trainer_restarts, pod.resume_from) == (3, 2, "/ckpt/step-7")
    assert pod.exit_code is None, "restarted in place: not a failed pod"
    assert pod.restart_rules
    assert pod.restarted_undeclared, "3 restarts where the annotations expect 2: no attempt declared for it yet"


def test_a_pod_without_in_place_annotations_runs_the_attempt_it_was_made_for() -> None:
    pod = observe_pod({"metadata": {"name": "llama-3-a1", "labels": LABELS}})
    assert (pod.in_place_attempt, pod.runs_attempt, pod.trainer_restarts, pod.restart_rules) == (None, 1, 0, False)
    assert not pod.restarted_undeclared
