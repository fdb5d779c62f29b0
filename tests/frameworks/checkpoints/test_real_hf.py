"""The mirror against HF Transformers' Trainer itself doing the writing: 2 ranks on CPU (torchrun, gloo),
a tiny GPT-2 built from a config and an in-memory dataset (nothing is downloaded).

Issue 14: rank 0 writes trainer_state.json with no barrier after the other ranks' files. A rank slower
than the settle rule's wait had its rng_state_<rank>.pth published missing, and the published copy was
never repaired when the file arrived.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from localcluster.trainerenv import INSTALL_TIMEOUT_SECONDS

from multinode.checkpoints import Mirror, list_mirrored, verify_mirrored
from multinode.checkpoints.layouts import Completion
from tests.frameworks.checkpoints.real_frameworks import WAIT_SECONDS, frameworks_env, published_files, two_ranks

STEPS = 2
CHECKPOINT = f"checkpoint-{STEPS}"

pytestmark = pytest.mark.timeout(2 * INSTALL_TIMEOUT_SECONDS + 3 * WAIT_SECONDS)

# Trains STEPS steps and saves once; rank 1 waits for the gate before it saves its RNG state, which is
# each rank's last file of an HF save (after the model, optimizer and scheduler).
WRITER = textwrap.dedent("""
    import os, sys, time, warnings
    warnings.filterwarnings("ignore")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    out, steps, gate = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 32
        def __getitem__(self, i):
            ids = (torch.arange(8) + i) % 32
            return {"input_ids": ids, "labels": ids}

    class SlowRankOne(Trainer):
        def _save_rng_state(self, output_dir):
            while self.args.process_index == 1 and not os.path.exists(gate):
                time.sleep(0.05)
            super()._save_rng_state(output_dir)

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8, bos_token_id=0, eos_token_id=0)
    args = TrainingArguments(output_dir=out, max_steps=steps, save_steps=steps, per_device_train_batch_size=2,
                             use_cpu=True, report_to="none", logging_strategy="no", ddp_backend="gloo",
                             disable_tqdm=True)
    SlowRankOne(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens()).train()
    torch.distributed.destroy_process_group()
    # The save is done and the test judges its files. Past this point, about one run in four of torch 2.15
    # with Transformers 5 aborts in the interpreter's teardown (`terminate called without an active
    # exception`, a C++ thread still joinable, after the process group is destroyed): not the writing
    # under test, so the writer leaves without the teardown.
    sys.stdout.flush()
    os._exit(0)
""")


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    return frameworks_env()


def test_with_the_world_size_a_checkpoint_waits_for_every_ranks_rng_state(tmp_path: Path,
                                                                           env: dict[str, str]) -> None:
    src, dst = tmp_path / "cache" / "job", tmp_path / "checkpoints" / "job"
    src.mkdir(parents=True)
    # settle_seconds=0: the settle rule alone would take the checkpoint at once, as a slow rank beats it.
    mirror = Mirror(src, dst, completion=Completion.AUTO, keep=2, workers=2, settle_seconds=0, world_size=2)
    with two_ranks(WRITER, [str(src), str(STEPS)], env, tmp_path) as writer:
        writer.wait_for(lambda: (src / CHECKPOINT / "trainer_state.json").is_file(), "trainer_state.json")
        assert (src / CHECKPOINT / "rng_state_0.pth").is_file()
        assert not (src / CHECKPOINT / "rng_state_1.pth").exists()

        during = mirror.sync_once()
        assert during.mirrored == [] and during.problems == []
        why = during.not_ready[CHECKPOINT]
        assert "waiting for rank files" in why and "rng_state_1.pth" in why, why
        assert list_mirrored(dst) == []

        writer.release()

    # A rank that died in the middle of writing its file (a fault torch cannot be made to produce on demand):
    # even with the job ended, which waives the settle rule, half a torch.save archive is not a rank file.
    rank_1_file = src / CHECKPOINT / "rng_state_1.pth"
    whole = rank_1_file.read_bytes()
    os.truncate(rank_1_file, len(whole) // 2)
    cut = mirror.sync_once(final=True)
    assert cut.mirrored == [] and "rng_state_1.pth is still being written" in cut.not_ready[CHECKPOINT], cut
    rank_1_file.write_bytes(whole)

    after = mirror.sync_once()
    assert [c.name for c in after.mirrored] == [CHECKPOINT], after
    assert {"rng_state_0.pth", "rng_state_1.pth", "trainer_state.json"} <= published_files(dst / CHECKPOINT)
    verify_mirrored(dst / CHECKPOINT, full=True)


def test_a_published_checkpoint_whose_source_grows_is_published_again_in_place(tmp_path: Path,
                                                                                env: dict[str, str]) -> None:
    src, dst = tmp_path / "cache" / "job", tmp_path / "checkpoints" / "job"
    src.mkdir(parents=True)
    # No world size: the settle rule alone decides, and a rank slower than it loses the race.
    mirror = Mirror(src, dst, completion=Completion.AUTO, keep=2, workers=2, settle_seconds=0)
    with two_ranks(WRITER, [str(src), str(STEPS)], env, tmp_path) as writer:
        writer.wait_for(lambda: (src / CHECKPOINT / "trainer_state.json").is_file(), "trainer_state.json")
        early = mirror.sync_once()
        assert [c.name for c in early.mirrored] == [CHECKPOINT], early
        assert "rng_state_1.pth" not in published_files(dst / CHECKPOINT)
        first_version = os.stat(dst / CHECKPOINT).st_ino
        reader = open(dst / CHECKPOINT / "rng_state_0.pth", "rb")  # noqa: SIM115 - a reader of the first version, open across the release; closed by `with reader` below
        writer.release()

    with reader:
        grown = mirror.sync_once()
        assert [c.name for c in grown.mirrored] == [CHECKPOINT] and grown.pruned == [], grown
        assert {"rng_state_0.pth", "rng_state_1.pth"} <= published_files(dst / CHECKPOINT)
        # Exchanged whole for the old directory, never written into: the open file is the old one, intact.
        assert os.stat(dst / CHECKPOINT).st_ino != first_version
        assert reader.read() == (src / CHECKPOINT / "rng_state_0.pth").read_bytes()
    verify_mirrored(dst / CHECKPOINT, full=True)
    assert [c.name for c in list_mirrored(dst)] == [CHECKPOINT]
    assert mirror.sync_once().mirrored == [], "an unchanged source is not published again"
    assert [p.name for p in dst.iterdir() if p.name.startswith(".")] == [".mirror.lock"], "no staging or trash left"


def test_a_pinned_checkpoint_is_not_replaced_when_its_source_grows(tmp_path: Path, env: dict[str, str]) -> None:
    src, dst = tmp_path / "cache" / "job", tmp_path / "checkpoints" / "job"
    src.mkdir(parents=True)
    mirror = Mirror(src, dst, completion=Completion.AUTO, keep=2, workers=2, settle_seconds=0,
                    pinned=lambda: {CHECKPOINT})   # an attempt resumed from it and may be reading it
    with two_ranks(WRITER, [str(src), str(STEPS)], env, tmp_path) as writer:
        writer.wait_for(lambda: (src / CHECKPOINT / "trainer_state.json").is_file(), "trainer_state.json")
        assert [c.name for c in mirror.sync_once().mirrored] == [CHECKPOINT]
        writer.release()
    assert mirror.sync_once().mirrored == []
    assert "rng_state_1.pth" not in published_files(dst / CHECKPOINT)


def test_a_single_process_trainers_rng_state_is_its_rank_file(tmp_path: Path, env: dict[str, str]) -> None:
    src, dst = tmp_path / "cache" / "job", tmp_path / "checkpoints" / "job"
    src.mkdir(parents=True)
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", str(writer),
                    str(src), str(STEPS), str(tmp_path / "gate")], env=env, check=True, capture_output=True,
                   timeout=WAIT_SECONDS)
    assert (src / CHECKPOINT / "rng_state.pth").is_file()

    report = Mirror(src, dst, completion=Completion.HF, keep=2, workers=2, settle_seconds=0,
                    world_size=1).sync_once()
    assert [c.name for c in report.mirrored] == [CHECKPOINT], report
    assert "rng_state.pth" in published_files(dst / CHECKPOINT)
