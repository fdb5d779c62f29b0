"""What the mirror writes into the job status, and what it reads from it."""

from __future__ import annotations

from pathlib import Path

from multinode.api import TrainingJobStatus
from multinode.checkpoints import IncompleteCheckpoint, MirroredCheckpoint, MirrorProblem, NotReady, SyncReport
from multinode.mirror.loop import final_sync_requested, pinned_names, status_update

T0 = 1_800_000_000.0   # 2027-01-15T08:00:00Z


def checkpoint(name: str, step: int) -> MirroredCheckpoint:
    return MirroredCheckpoint(name=name, path=Path(f"/checkpoints/llama/{name}"), step=step, total_bytes=100,
                              files=4, mirrored_at="2026-11-20T12:00:00Z", source=f"/cache/llama/{name}",
                              completed_at="2026-11-20T11:59:50Z")


def report(mirrored=(), latest=None, problems=()) -> SyncReport:
    return SyncReport(mirrored=list(mirrored), pruned=[], problems=list(problems), latest=latest, bytes_copied=0,
                      bytes_linked=0, seconds=0.1, lag_seconds=[])


def test_a_new_checkpoint_is_reported_with_its_path_and_count() -> None:
    ckpt = checkpoint("checkpoint-100", 100)
    update = status_update({}, report([ckpt], latest=ckpt), mirrored_total=3)

    assert update == {"latest": {"name": "checkpoint-100", "path": "/checkpoints/llama/checkpoint-100", "step": 100,
                                 "bytes": 100, "mirroredAt": "2026-11-20T12:00:00Z"},
                      "mirrored": 3, "lastSyncTime": "2026-11-20T12:00:00Z"}


def test_an_uneventful_pass_writes_nothing() -> None:
    ckpt = checkpoint("checkpoint-100", 100)
    reported = status_update({}, report([ckpt], latest=ckpt), mirrored_total=1)

    assert status_update(reported, report(latest=ckpt), mirrored_total=1) is None


def test_a_problem_is_reported_once_and_cleared_when_gone() -> None:
    problem = MirrorProblem(reason="DestinationFull", message="no space left writing rank_1.pt", checkpoint="c")
    first = status_update({}, report(problems=[problem]), mirrored_total=0)
    assert first["problem"]["reason"] == "DestinationFull"

    assert status_update(first, report(problems=[problem]), mirrored_total=0) is None
    assert status_update(first, report(), mirrored_total=0) == {"problem": None}


def test_final_sync_is_requested_only_by_the_operators_condition() -> None:
    asked = {"conditions": [{"type": "CheckpointsSynced", "status": "False", "reason": "FinalSyncRequested"}]}
    done = {"conditions": [{"type": "CheckpointsSynced", "status": "True", "reason": "FinalSyncDone"}]}

    assert final_sync_requested(asked)
    assert not final_sync_requested(done) and not final_sync_requested({})


def test_the_checkpoint_a_running_attempt_resumed_from_is_pinned_only_if_it_is_ours() -> None:
    dest = Path("/checkpoints/llama")

    assert pinned_names({"resumedFrom": "/checkpoints/llama/checkpoint-100"}, dest) == {"checkpoint-100"}
    assert pinned_names({"resumedFrom": "/checkpoints/other/checkpoint-100"}, dest) == set()
    assert pinned_names({}, dest) == set()


def incomplete(name: str, step: int | None, since: float = T0) -> IncompleteCheckpoint:
    return IncompleteCheckpoint(name=name, step=step, reason=NotReady.WAITING_FOR_RANK_FILES,
                                message=f"/cache/llama/{name}: waiting for 1 of 8 ranks (rank 7)", since=since)


def scanned(*checkpoints: IncompleteCheckpoint) -> SyncReport:
    done = report()
    done.scanned, done.incomplete = True, list(checkpoints)
    return done


def test_checkpoints_not_ready_are_reported_newest_first_bounded_and_cleared_when_gone() -> None:
    many = [incomplete(f"step-{s}", s) for s in range(100, 1000, 100)] + [incomplete("final", None)]
    first = status_update({}, scanned(*many), mirrored_total=0)

    assert [c["name"] for c in first["notReady"]] == ["final", "step-900", "step-800", "step-700", "step-600"]
    assert first["notReady"][1] == {"name": "step-900", "step": 900, "reason": "WaitingForRankFiles",
                                    "message": "/cache/llama/step-900: waiting for 1 of 8 ranks (rank 7)",
                                    "since": "2027-01-15T08:00:00Z"}
    assert "step" not in first["notReady"][0]   # no step in the name: the key is absent, not null
    TrainingJobStatus.model_validate({"checkpoints": first})   # what the CRD admits

    assert status_update(first, scanned(*many), mirrored_total=0) is None
    assert status_update(first, scanned(), mirrored_total=0) == {"notReady": None}


def test_a_pass_that_could_not_read_the_cache_leaves_not_ready_as_it_was() -> None:
    first = status_update({}, scanned(incomplete("step-100", 100)), mirrored_total=0)
    busy = report(problems=[MirrorProblem(reason="DestinationBusy", message="another mirror holds the lock")])

    assert "notReady" not in status_update(first, busy, mirrored_total=0)


def test_values_longer_than_the_crd_allows_are_fitted_so_the_patch_is_admitted() -> None:
    """A directory name may have 255 bytes, a name field 253 characters; a name with 20 digits has a step
    beyond int64; a name with bytes that are not UTF-8 cannot go into JSON as they are. Unfitted, any one
    of them made every status patch of the mirror fail."""
    long_name = "checkpoint_0000100-" + "x" * 236                       # 255 characters
    odd_name = "step-" + "\udcff" * 3                                    # os.fsdecode of b"step-\xff\xff\xff"
    ckpt = MirroredCheckpoint(name=long_name, path=Path("/checkpoints/llama") / long_name,
                              step=10**20, total_bytes=100, files=1, mirrored_at="2026-11-20T12:00:00Z",
                              source="/cache/llama/x", completed_at=None)
    problem = MirrorProblem(reason="SourceChanged", message="m" * 10_000, checkpoint=long_name)
    done = scanned(incomplete(long_name, 10**20), incomplete(odd_name, None))
    done.latest, done.mirrored, done.problems = ckpt, [ckpt], [problem]

    update = status_update({}, done, mirrored_total=1)

    TrainingJobStatus.model_validate({"checkpoints": update})   # the CRD is generated from these models
    assert len(update["latest"]["name"]) == 253 and update["latest"]["name"].endswith("\u2026")
    assert "step" not in update["latest"] or update["latest"]["step"] is None
    assert len(update["problem"]["message"]) == 4096
    assert update["notReady"][0]["name"] == "step-\ufffd\ufffd\ufffd"
    update["problem"]["message"].encode("utf-8")
    done.mirrored = []
    assert status_update(update, done, mirrored_total=1) is None   # fitted values compare equal next pass
