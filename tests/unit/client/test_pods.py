"""Reading node pods and choosing which ranks get a log stream, with plain pod JSON."""

from __future__ import annotations

from typing import Any

from multinode.api import LABEL_ATTEMPT, LABEL_JOB_NAME, LABEL_NODE_INDEX
from multinode.client.logs import LogScope
from multinode.client.pods import NodePod, by_attempt, node_pod, node_pods, select_for_logs


def pod_json(rank: int, attempt: int = 0, phase: str = "Running", state: dict | None = None,
             restarts: int = 0) -> dict[str, Any]:
    state = state if state is not None else {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    return {"metadata": {"name": f"j-{rank}-a{attempt}",
                         "labels": {LABEL_JOB_NAME: "j", LABEL_NODE_INDEX: str(rank), LABEL_ATTEMPT: str(attempt)}},
            "spec": {"nodeName": f"node-{rank}"},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "trainer", "state": state, "restartCount": restarts}]}}


def pod(rank: int, attempt: int = 0, phase: str = "Running", exit_code: int | None = None) -> NodePod:
    return NodePod(name=f"j-{rank}-a{attempt}", rank=rank, attempt=attempt, phase=phase,
                   trainer_state="terminated" if exit_code is not None else "running", exit_code=exit_code)


def test_a_node_pod_is_read_from_its_labels_and_trainer_status() -> None:
    failed = node_pod(pod_json(3, 1, "Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}))
    assert failed == NodePod(name="j-3-a1", rank=3, attempt=1, phase="Failed", node="node-3",
                             trainer_state="terminated", exit_code=137, reason="OOMKilled")
    assert failed.started and failed.failing


def test_the_mirror_pod_and_a_waiting_trainer() -> None:
    mirror = {"metadata": {"name": "j-mirror", "labels": {LABEL_JOB_NAME: "j"}}, "status": {"phase": "Running"}}
    assert node_pod(mirror) is None
    waiting = node_pod(pod_json(0, state={"waiting": {"reason": "PodInitializing"}}, phase="Pending"))
    assert waiting is not None and not waiting.started and not waiting.failing
    crashing = node_pod(pod_json(1, state={"waiting": {"reason": "CrashLoopBackOff"}}, restarts=2))
    assert crashing is not None and crashing.failing
    no_status = node_pod({"metadata": {"name": "j-0-a0", "labels": {LABEL_NODE_INDEX: "0"}}})
    assert no_status == NodePod(name="j-0-a0", rank=0, attempt=0, phase="Pending")


def test_a_pod_restarted_in_place_is_of_the_attempt_its_annotation_names() -> None:
    restarted = pod_json(1, 0, restarts=2)
    restarted["metadata"]["annotations"] = {"multinode.dev/attempt": "2"}
    parsed = node_pod(restarted)
    assert parsed is not None and (parsed.name, parsed.attempt) == ("j-1-a0", 2)


def test_a_hot_spare_is_a_node_pod_once_it_took_a_rank() -> None:
    spare = {"metadata": {"name": "j-s0", "labels": {LABEL_JOB_NAME: "j", "multinode.dev/spare": "0"}},
             "spec": {"nodeName": "node-9"}, "status": {"phase": "Pending"}}
    assert node_pod(spare) is None, "waiting: no rank yet"
    spare["metadata"]["annotations"] = {"multinode.dev/node-index": "0", "multinode.dev/attempt": "3"}
    spare["status"] = {"phase": "Running", "containerStatuses": [{"name": "trainer", "state": {"running": {}}}]}
    parsed = node_pod(spare)
    assert parsed is not None and (parsed.name, parsed.rank, parsed.attempt, parsed.node) == ("j-s0", 0, 3, "node-9")


def test_pods_are_grouped_by_attempt_in_rank_order() -> None:
    pods = node_pods([pod_json(1, 1), pod_json(0, 0), pod_json(0, 1), pod_json(1, 0)])
    assert [(p.attempt, p.rank) for p in pods] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {a: [p.rank for p in ps] for a, ps in by_attempt(reversed(pods)).items()} == {0: [0, 1], 1: [0, 1]}


def test_a_small_job_streams_every_rank() -> None:
    chosen, left_out = select_for_logs([pod(r) for r in range(4)], max_streams=8)
    assert [p.rank for p in chosen] == [0, 1, 2, 3] and left_out == 0


def test_a_big_job_streams_the_leader_then_failing_then_not_running_ranks() -> None:
    pods = [pod(r) for r in range(1000)]
    pods[700] = pod(700, phase="Failed", exit_code=1)
    pods[12] = pod(12, exit_code=3)  # exited non-zero, phase not yet updated
    pods[500] = pod(500, phase="Pending")
    chosen, left_out = select_for_logs(pods, max_streams=5)
    assert [p.rank for p in chosen] == [0, 1, 12, 500, 700]
    assert left_out == 995
    assert select_for_logs(pods, max_streams=2)[0] == [pods[0], pods[12]]


def test_ranks_asked_for_are_all_streamed_and_zero_means_no_limit() -> None:
    pods = [pod(r) for r in range(100)]
    chosen, left_out = select_for_logs(pods, ranks=[5, 99, 7, 1000], max_streams=1)
    assert [p.rank for p in chosen] == [5, 7, 99] and left_out == 0
    assert len(select_for_logs(pods, max_streams=0)[0]) == 100


def test_the_scope_reads_the_newest_attempt_unless_told_otherwise() -> None:
    pods = [pod(0, 0, "Failed", 1), pod(1, 0, "Failed", 1), pod(0, 1), pod(1, 1)]
    assert [(p.attempt, p.rank) for p in LogScope().pods(pods)] == [(1, 0), (1, 1)]
    assert [(p.attempt, p.rank) for p in LogScope(attempt=0).pods(pods)] == [(0, 0), (0, 1)]
    assert len(LogScope(all_attempts=True).pods(pods)) == 4
    assert LogScope(attempt=7).pods(pods) == []
