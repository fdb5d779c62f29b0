"""The mirror against DeepSpeed itself doing the writing: ZeRO stage 2 on CPU, 2 ranks (torchrun, gloo).

DeepSpeed's rank 0 writes `latest` before the barrier that ends the save, so `latest` may name a tag
whose other ranks are still writing their optimizer partitions. With the job's world size the mirror
waits for every data-parallel rank's zero_pp_rank_<r>_mp_rank_00_optim_states.pt.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from localcluster.trainerenv import INSTALL_TIMEOUT_SECONDS

from multinode.checkpoints import Mirror, list_mirrored, verify_mirrored
from multinode.checkpoints.layouts import Completion
from tests.frameworks.checkpoints.real_frameworks import WAIT_SECONDS, frameworks_env, published_files, two_ranks

STEPS = 3
TAG = f"global_step{STEPS}"
RANK_1_FILE = "zero_pp_rank_1_mp_rank_00_optim_states.pt"

pytestmark = pytest.mark.timeout(2 * INSTALL_TIMEOUT_SECONDS + 2 * WAIT_SECONDS)

# Trains STEPS steps, then saves; rank 1's checkpoint engine waits for the gate before it writes its own
# optimizer partition (its state is gathered already: only the file is late, as with a slow disk).
WRITER = textwrap.dedent("""
    import os, sys, time, warnings
    warnings.filterwarnings("ignore")
    import torch
    import deepspeed

    out, steps, gate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 2}, "steps_per_print": 10**9}
    engine, *_ = deepspeed.initialize(model=model, config=config,
                                      optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3))
    for _ in range(steps):
        engine.backward(engine(torch.randn(2, 16)).pow(2).mean())
        engine.step()

    save = engine.checkpoint_engine.save
    def slow_save(state_dict, path):
        while os.path.basename(path).startswith("zero_pp_rank_1_") and not os.path.exists(gate):
            time.sleep(0.05)
        return save(state_dict, path)
    engine.checkpoint_engine.save = slow_save
    engine.save_checkpoint(out, tag=f"global_step{steps}")
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)   # no interpreter teardown, which now and then aborts (see test_real_hf.py)
""")


def test_with_the_world_size_the_tag_latest_names_waits_for_every_ranks_optimizer_partition(tmp_path: Path) -> None:
    src, dst = tmp_path / "cache" / "job", tmp_path / "checkpoints" / "job"
    src.mkdir(parents=True)
    mirror = Mirror(src, dst, completion=Completion.AUTO, keep=2, workers=2, settle_seconds=0, world_size=2)
    with two_ranks(WRITER, [str(src), str(STEPS)], frameworks_env(), tmp_path) as writer:
        latest = src / "latest"
        writer.wait_for(lambda: latest.is_file() and latest.read_text().strip() == TAG, "`latest` naming the tag")
        assert (src / TAG / "zero_pp_rank_0_mp_rank_00_optim_states.pt").is_file()
        assert not (src / TAG / RANK_1_FILE).exists()

        during = mirror.sync_once()
        assert during.mirrored == [] and during.problems == []
        why = during.not_ready[TAG]
        assert "waiting for rank files" in why and RANK_1_FILE in why, why
        assert list_mirrored(dst) == []

        writer.release()

    after = mirror.sync_once()
    assert [c.name for c in after.mirrored] == [TAG], after
    assert {"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
            RANK_1_FILE} <= published_files(dst / TAG)
    verify_mirrored(dst / TAG, full=True)
