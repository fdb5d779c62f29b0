"""The mirror relays the operator's checkpoint request (status.checkpointRequest.id) into the file the trainers
read, and multinode.progress.CheckpointRequests reads it back: one end-to-end path through real files."""

from __future__ import annotations

from pathlib import Path

from multinode.api.checkpointing import CHECKPOINT_REQUEST_FILE
from multinode.checkpoints.manifest import list_mirrored
from multinode.mirror.loop import relay_checkpoint_request
from multinode.api.conditions import Reason
from multinode.progress import DRAIN_REASON, CheckpointRequests


def _status(request_id: str | None) -> dict:
    return {"checkpointRequest": {"id": request_id, "state": "Requested"}} if request_id else {}


def test_a_new_request_is_written_once_and_atomically(tmp_path: Path) -> None:
    assert relay_checkpoint_request(_status(None), tmp_path) is None
    assert not (tmp_path / CHECKPOINT_REQUEST_FILE).exists()

    assert relay_checkpoint_request(_status("a0-1"), tmp_path) == "a0-1"
    assert (tmp_path / CHECKPOINT_REQUEST_FILE).read_text() == "a0-1\n\n"
    assert relay_checkpoint_request(_status("a0-1"), tmp_path) is None, "unchanged: not rewritten"
    assert relay_checkpoint_request(_status("cli-2"), tmp_path) == "cli-2"
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_REQUEST_FILE], "no staged file left"


def test_the_request_file_is_never_taken_for_a_checkpoint(tmp_path: Path) -> None:
    relay_checkpoint_request(_status("a0-1"), tmp_path)
    assert list_mirrored(tmp_path) == []


def test_a_trainer_sees_each_new_request_once_and_not_one_made_before_it_started(tmp_path: Path) -> None:
    relay_checkpoint_request(_status("old"), tmp_path)
    requests = CheckpointRequests(str(tmp_path / CHECKPOINT_REQUEST_FILE))
    assert not requests.pending(), "a request before this process started was answered by what it resumed from"

    relay_checkpoint_request(_status("new"), tmp_path)
    assert requests.pending() and requests.pending(), "pending until saved"
    requests.saved()
    assert not requests.pending()


def test_without_the_variable_or_the_file_there_is_never_a_request(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MULTINODE_CHECKPOINT_REQUEST_FILE", raising=False)
    assert not CheckpointRequests().pending()
    missing = CheckpointRequests(str(tmp_path / "nowhere" / CHECKPOINT_REQUEST_FILE))
    assert not missing.pending()
    missing.saved()
    assert not missing.pending()


def test_a_trainer_learns_whether_the_request_is_for_a_drain(tmp_path: Path) -> None:
    requests = CheckpointRequests(str(tmp_path / CHECKPOINT_REQUEST_FILE))
    relay_checkpoint_request({"checkpointRequest": {"id": "cli-1", "reason": "UserRequested"}}, tmp_path)
    assert requests.pending() and not requests.moving
    requests.saved()
    relay_checkpoint_request({"checkpointRequest": {"id": "a0-2", "reason": Reason.NODE_CORDONED.value}}, tmp_path)
    assert requests.pending() and requests.moving
    assert DRAIN_REASON == Reason.NODE_CORDONED, "progress.py spells the reason itself: the two agree"
