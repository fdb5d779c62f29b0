"""`multinode status` text and tables, from plain status objects."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from multinode.cli.describe import age, describe, interesting_nodes
from multinode.cli.output import paint, table, use_colour

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def job(status: dict[str, Any], num_nodes: int = 2) -> dict[str, Any]:
    return {"metadata": {"name": "llama", "namespace": "ml"}, "spec": {"numNodes": num_nodes}, "status": status}


def node(index: int, phase: str = "Running", **extra: Any) -> dict[str, Any]:
    return {"index": index, "pod": f"llama-{index}-a0", "node": f"gpu-{index}", "phase": phase, **extra}


def test_a_table_is_aligned_with_uppercase_headers_as_kubectl_prints() -> None:
    text = table(["name", "phase"], [["a", "Running"], ["longer-name", None]])
    assert text.splitlines() == ["NAME          PHASE", "a             Running", "longer-name   <none>"]


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch: Any) -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(Tty()) and not use_colour(object())  # type: ignore[arg-type]
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Tty())  # type: ignore[arg-type]
    assert paint("x", "bad", True) == "\033[31mx\033[0m" and paint("x", "bad", False) == "x"
    # Colour never moves a column: padding is computed on the plain text.
    plain = table(["a", "b"], [["1", "2"]]).splitlines()[1]
    coloured = table(["a", "b"], [["1", "2"]], moods=["bad"], colour=True).splitlines()[1]
    assert coloured == f"\033[31m{plain}\033[0m"


def test_ages_read_like_kubectl() -> None:
    assert [age(t, NOW) for t in ("2026-01-01T11:59:18Z", "2026-01-01T11:55:00Z", "2026-01-01T09:00:00Z",
                                  "2025-12-29T12:00:00Z")] == ["42s", "5m", "3h", "3d"]
    assert age(None, NOW) is None and age("soon", NOW) is None


def test_a_running_job_shows_phase_conditions_and_every_node() -> None:
    text = describe(job({"phase": "Running", "ready": "2/2", "attempt": 0, "startTime": "2026-01-01T11:58:00Z",
                         "conditions": [{"type": "Running", "status": "True", "reason": "AllNodesRunning",
                                         "message": "2/2 nodes running", "lastTransitionTime": "2026-01-01T11:59:00Z"}],
                         "nodeStatuses": [node(0), node(1)]}), NOW)
    lines = text.splitlines()
    assert "Phase:         Running" in lines and "Ready:         2/2" in lines
    assert "Started:       2026-01-01T11:58:00Z (2m ago)" in lines
    assert "  TYPE      STATUS   REASON            AGE   MESSAGE" in lines
    assert "  Running   True     AllNodesRunning   60s   2/2 nodes running" in lines
    assert "  INDEX   POD          NODE    PHASE     REASON   EXIT" in lines
    assert "  1       llama-1-a0   gpu-1   Running" in lines
    assert "Checkpoints:" not in text and "Restart history:" not in text


def test_a_big_job_shows_only_the_nodes_that_are_not_fine() -> None:
    nodes = [node(i) for i in range(1000)]
    nodes[7] = node(7, "Failed", reason="Error", exitCode=1)
    nodes[400] = node(400, "Pending", reason="Unschedulable")
    text = describe(job({"phase": "Running", "nodeStatuses": nodes}, 1000), NOW)
    rows = [line for line in text.splitlines() if line.startswith("  ") and "llama-" in line]
    assert [row.split()[0] for row in rows] == ["7", "400"]
    assert "  … 998 more fine (Running 998)" in text.splitlines()


def test_not_fine_nodes_beyond_the_cap_are_counted() -> None:
    nodes = [node(i, "Pending") for i in range(30)]
    shown, hidden = interesting_nodes(nodes, 20)
    assert len(shown) == 20 and len(hidden) == 10
    assert "… 10 more (10 not fine; Pending 10): -o yaml shows all" in describe(job({"nodeStatuses": nodes}, 30), NOW)


def test_restarts_and_checkpoints_with_their_lag() -> None:
    status = {"phase": "Running", "attempt": 1, "restarts": 1, "restartStrategy": "InPlace",
              "restartHistory": [{"attempt": 0, "reason": "PodFailed", "message": "llama-1-a0 exited 1",
                                  "counted": True, "time": "2026-01-01T11:50:00Z"}],
              "checkpoints": {"latest": {"name": "step-100", "path": "/ckpt/step-100", "step": 100,
                                         "bytes": 3 * 1024 ** 3, "mirroredAt": "2026-01-01T11:59:30Z"},
                              "mirrored": 4, "lastSyncTime": "2026-01-01T11:59:30Z",
                              "problem": {"reason": "DestinationFull", "message": "no space", "time": "x"}},
              "progress": {"step": 130, "lastProgressTime": "2026-01-01T11:59:58Z"}}
    lines = describe(job(status), NOW).splitlines()
    assert "Attempt:       1 (restarts: 1 counted, 0 uncounted)" in lines
    assert "Restart:       InPlace" in lines
    assert "  0         PodFailed   yes       10m   llama-1-a0 exited 1" in lines
    assert "  Latest:     step-100 (step 100, 3.0 GiB), mirrored 30s ago, at /ckpt/step-100" in lines
    assert "  Lag:        30 steps behind training (step 130)" in lines
    assert "  Problem:    DestinationFull: no space" in lines


def test_status_fields_this_version_does_not_know_are_shown_as_key_values() -> None:
    status = {"phase": "Running", "progress": {"step": 1200, "lastProgressTime": "2026-01-01T11:59:50Z"},
              "goodput": {"ratio": 0.93, "lost": {"restartsSeconds": 40}}, "somethingNew": ["a", "b"]}
    text = describe(job(status), NOW)
    assert "Progress:\n  step: 1200\n  lastProgressTime: 2026-01-01T11:59:50Z (10s ago)" in text
    assert "Goodput:\n  ratio: 0.93\n  lost:\n    restartsSeconds: 40" in text
    assert "SomethingNew:\n  - a\n  - b" in text


def test_a_job_without_status_yet() -> None:
    text = describe({"metadata": {"name": "new", "namespace": "ml"}, "spec": {"numNodes": 4}}, NOW)
    assert "Phase:         <none>" in text and "Ready:         -/4" in text


def test_a_huge_job_shows_its_counts_and_says_how_many_nodes_the_status_left_out() -> None:
    nodes = [node(i) for i in range(98)] + [node(500, "Failed", reason="Error", exitCode=1), node(9000, "Pending")]
    status = {"phase": "Running", "nodeStatuses": nodes, "nodeStatusesOmitted": 9900,
              "nodeCounts": {"noPod": 0, "pending": 1, "running": 9998, "succeeded": 0, "failed": 1, "unknown": 0,
                             "notFine": 2}}
    lines = describe(job(status, 10_000), NOW).splitlines()
    assert "  Running 9998, Pending 1, Failed 1 (2 not fine)" in lines
    rows = [line.split()[0] for line in lines if line.startswith("  ") and "llama-" in line]
    assert rows == ["500", "9000"]
    assert "  … 98 more fine (Running 98)" in lines
    assert "  … 9900 more not in the status (it lists 100 nodes, those not fine first)" in lines
    assert "NodeCounts:" not in lines, "no generic section for fields shown in the node section"
