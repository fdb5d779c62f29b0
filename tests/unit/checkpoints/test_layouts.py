"""Each framework's layout, complete and in progress: only complete checkpoints are taken and mirrored."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from multinode.checkpoints import Completion, latest_complete_checkpoint, scan_checkpoints
from tests.unit.checkpoints import checkpoint_factory as make
from tests.unit.checkpoints.checkpoint_factory import HOUR_AGO, Clock, published_names, write

SETTLE = 60.0


def complete(source: Path, completion: Completion = Completion.AUTO, **kwargs) -> set[str]:
    kwargs.setdefault("now", time.time())
    return {c.name for c in scan_checkpoints(source, completion, settle_seconds=SETTLE, **kwargs) if c.complete}


def test_marker_complete_only_once_complete_exists(src: Path) -> None:
    make.sharded(src, "checkpoint_0000100")
    make.sharded(src, "checkpoint_0000200", marker=False)

    for mode in (Completion.AUTO, Completion.MARKER):
        assert complete(src, mode) == {"checkpoint_0000100"}
    why = {c.name: c.why for c in scan_checkpoints(src, Completion.MARKER)}
    assert why["checkpoint_0000200"] == "no COMPLETE marker"


def test_dcp_complete_once_metadata_is_renamed_into_place(src: Path) -> None:
    make.dcp(src, "pretrain-a", metadata="final")
    make.dcp(src, "pretrain-b", metadata="tmp")
    make.dcp(src, "pretrain-c", metadata="none")

    for mode in (Completion.AUTO, Completion.DCP):
        assert complete(src, mode) == {"pretrain-a"}
    why = {c.name: c.why for c in scan_checkpoints(src)}
    assert "in progress" in why["pretrain-b"]


def test_torchtitan_step_dirs_need_metadata_and_the_shards_it_names(src: Path) -> None:
    make.dcp(src, "step-100", shards=4)
    make.dcp(src, "step-200", shards=4, metadata="tmp")
    make.dcp(src, "step-300", shards=4, missing=1)

    found = {c.name: c for c in scan_checkpoints(src)}
    assert {n for n, c in found.items() if c.complete} == {"step-100"}
    assert found["step-100"].framework == "torchtitan" and found["step-100"].step == 100
    assert "__3_0.distcp" in found["step-300"].why


def test_megatron_trusts_the_tracker_not_the_directories(src: Path) -> None:
    make.megatron(src, [100, 200, 300], tracker="200")
    # A torch_dist save of iteration 300 may look like finished DCP before rank 0 updates the tracker.
    make.dcp(src, "iter_0000300", metadata="final")

    for mode in (Completion.AUTO, Completion.MEGATRON):
        assert complete(src, mode) == {"iter_0000100", "iter_0000200"}


def test_megatron_without_a_tracker_has_nothing_complete_and_release_is_named_by_it(src: Path) -> None:
    make.megatron(src, [100], tracker=None)
    assert complete(src) == set()

    write(src / "release" / "mp_rank_00" / "model_optim_rng.pt", b"weights")
    write(src / "latest_checkpointed_iteration.txt", b"release\n")
    assert complete(src) == {"release"}


def test_deepspeed_latest_tag_settles_before_it_counts(src: Path, make_mirror, clock: Clock, dst: Path) -> None:
    make.deepspeed(src, [100, 200, 300], latest=200)
    mirror = make_mirror(settle_seconds=SETTLE)

    assert {c.name for c in mirror.sync_once().mirrored} == {"global_step100"}
    clock.advance(30)
    # A rank still writing its shard of the tag `latest` names: the clock of the settle rule restarts.
    write(src / "global_step200" / "zero_pp_rank_1_mp_rank_00_optim_states.pt", b"more bytes")
    assert mirror.sync_once().mirrored == []
    clock.advance(SETTLE - 1)
    assert mirror.sync_once().mirrored == []   # 89 s after the first look, but only 59 s unchanged
    clock.advance(1)
    assert {c.name for c in mirror.sync_once().mirrored} == {"global_step200"}
    clock.advance(3600)
    mirror.sync_once()
    assert published_names(dst) == {"global_step100", "global_step200"}   # 300 is newer than `latest`


def test_deepspeed_final_needs_no_settling_but_never_takes_a_step_newer_than_latest(src: Path, make_mirror) -> None:
    make.deepspeed(src, [100, 200, 300], latest=200)

    report = make_mirror(settle_seconds=SETTLE).sync_once(final=True)

    assert {c.name for c in report.mirrored} == {"global_step100", "global_step200"}
    assert complete(src, Completion.DEEPSPEED, final=True) == {"global_step100", "global_step200"}


def test_deepspeed_without_latest_is_in_progress(src: Path) -> None:
    make.deepspeed(src, [100], latest=None)
    assert complete(src, final=True) == set()


def test_hf_trainer_state_then_settle(src: Path, make_mirror, clock: Clock) -> None:
    make.hf(src, 100)
    make.hf(src, 200, trainer_state=False)
    mirror = make_mirror(settle_seconds=SETTLE)

    assert mirror.sync_once().mirrored == []
    clock.advance(SETTLE)
    assert [c.name for c in mirror.sync_once().mirrored] == ["checkpoint-100"]
    assert make_mirror(settle_seconds=SETTLE).sync_once(final=True).mirrored == []   # 200 never


def test_hf_without_a_tracker_settles_by_later_writes_in_the_cache_never_by_the_mirrors_clock(src: Path) -> None:
    make.hf(src, 100, age=HOUR_AGO)
    make.hf(src, 200)
    # However far the mirror's clock is ahead of the files' (another machine's), one look settles nothing
    # that the cache itself does not show finished: file times are compared with file times only.
    far_ahead = time.time() + 10 * HOUR_AGO

    assert complete(src, now=far_ahead) == {"checkpoint-100"}   # checkpoint-200 was written an hour later
    newer = write(src / "checkpoint-300" / "model.safetensors", b"the next save")
    later = (src / "checkpoint-200" / "trainer_state.json").stat().st_mtime + SETTLE + 1
    os.utime(newer, (later, later))   # the trainer wrote again, SETTLE after its last write to checkpoint-200
    assert complete(src) == {"checkpoint-100", "checkpoint-200"}
    assert complete(src, Completion.HF, final=True) == {"checkpoint-100", "checkpoint-200"}


@pytest.mark.parametrize("mode", [Completion.AUTO, Completion.NEMO])
def test_nemo_unfinished_marker_beside_or_inside(src: Path, mode: Completion) -> None:
    done = make.nemo(src, 100)
    make.nemo(src, 200, unfinished="sibling")
    make.nemo(src, 300, unfinished="inner")

    assert complete(src, mode) == {done.name}


def test_orbax_final_name_not_the_tmp_one(src: Path) -> None:
    make.orbax(src, 100)
    make.orbax(src, 200, committed=False)
    write(src / "300" / "some-file", b"a numbered directory written in place")

    found = {c.name: c for c in scan_checkpoints(src)}
    assert {n for n, c in found.items() if c.complete} == {"100"}
    assert found["200.orbax-checkpoint-tmp-1795216897"].framework == "orbax"
    assert found["200.orbax-checkpoint-tmp-1795216897"].step == 200
    assert complete(src, Completion.ORBAX) == {"100", "300"}   # asked for Orbax: a bare number is its commit


def test_temporary_names_never_count_and_hidden_ones_are_not_candidates(src: Path) -> None:
    for name in ("checkpoint_0000300.tmp", "tmp-checkpoint-400", ".hidden", "checkpoint_0000500-unfinished"):
        make.sharded(src, name, shards=1)

    found = {c.name: c for c in scan_checkpoints(src, final=True)}
    assert set(found) == {"checkpoint_0000300.tmp", "tmp-checkpoint-400", "checkpoint_0000500-unfinished"}
    assert not any(c.complete for c in found.values())


def test_an_explicit_mode_ignores_other_layouts(src: Path) -> None:
    make.dcp(src, "pretrain-a")
    make.sharded(src, "checkpoint_0000100")

    assert complete(src, Completion.MARKER) == {"checkpoint_0000100"}
    assert complete(src, Completion.DCP) == {"pretrain-a"}


def test_tmp_files_inside_a_complete_checkpoint_are_not_copied(src: Path, dst: Path, make_mirror) -> None:
    ckpt = make.sharded(src, "checkpoint_0000100", shards=2)
    write(ckpt / "rank_00002.pt.tmp", b"abandoned")

    make_mirror().sync_once()

    assert not (dst / "checkpoint_0000100" / "rank_00002.pt.tmp").exists()
    manifest = json.loads((dst / "checkpoint_0000100" / "mirror-manifest.json").read_text())
    assert [f["path"] for f in manifest["files"]] == ["COMPLETE", "manifest.json", "rank_00000.pt", "rank_00001.pt"]


def test_every_layout_in_one_cache_only_complete_ones_are_mirrored(src: Path, dst: Path, make_mirror,
                                                                   clock: Clock) -> None:
    make.sharded(src, "checkpoint_0000100", shards=2)
    make.sharded(src, "checkpoint_0000150", shards=2, marker=False)
    make.dcp(src, "step-100")
    make.dcp(src, "step-200", metadata="tmp")
    make.megatron(src, [100, 200], tracker="100")
    make.deepspeed(src, [100, 200, 300], latest=200)
    make.hf(src, 100)
    make.hf(src, 200, trainer_state=False)
    nemo_done = make.nemo(src, 100)
    make.nemo(src, 200, unfinished="sibling")
    make.orbax(src, 100)
    make.orbax(src, 200, committed=False)
    make.sharded(src, "tmp-checkpoint-900", shards=1)
    mirror = make_mirror(settle_seconds=SETTLE)

    first = {c.name for c in mirror.sync_once().mirrored}
    clock.advance(SETTLE)
    settled = {c.name for c in mirror.sync_once().mirrored}

    assert first == {"checkpoint_0000100", "step-100", "iter_0000100", "global_step100", nemo_done.name, "100"}
    assert settled == {"global_step200", "checkpoint-100"}
    assert published_names(dst) == first | settled


def test_candidates_are_ordered_by_step_then_mtime_and_latest_is_the_newest_complete(src: Path) -> None:
    make.sharded(src, "checkpoint_0001000", shards=1)
    make.sharded(src, "checkpoint_0000200", shards=1)
    make.sharded(src, "checkpoint_0002000", shards=1, marker=False)
    make.sharded(src, "best", shards=1)

    candidates = scan_checkpoints(src)

    assert [c.name for c in candidates] == ["best", "checkpoint_0000200", "checkpoint_0001000", "checkpoint_0002000"]
    assert latest_complete_checkpoint(candidates).name == "checkpoint_0001000"
    assert latest_complete_checkpoint([c for c in candidates if not c.complete]) is None
