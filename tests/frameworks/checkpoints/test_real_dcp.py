"""The mirror against torch.distributed.checkpoint itself doing the writing (torch from the host-built
trainer env, as tests/frameworks/examples does).

A DCP save into a step directory that already holds a save (DCP's default overwrite=True, or a retried
save) rewrites the shard files first and replaces `.metadata` last. Until then the old `.metadata` still
names every shard: the mirror must not take that mix for a complete checkpoint, and once the new save
is complete it must publish it in the old one's place.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from localcluster.trainerenv import INSTALL_TIMEOUT_SECONDS, ensure_trainer_env

from multinode.checkpoints import Mirror, list_mirrored
from multinode.checkpoints.layouts import Completion

STEP = "step-5"
WAIT_SECONDS = 300  # importing torch takes seconds on 2 cores, minutes when they are shared

pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_SECONDS + 4 * WAIT_SECONDS)

# Saves one value into every tensor; with --pause-before-metadata, DCP's shards are written and the save
# waits for a file to appear before DCP writes .metadata (a slow rank, as the mirror would meet it).
WRITER = textwrap.dedent("""
    import os, sys, time, warnings
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter
    warnings.filterwarnings("ignore")
    path, value, gate = sys.argv[1], float(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else None)

    class SlowToFinish(FileSystemWriter):
        def finish(self, metadata, results):
            print("shards written", flush=True)
            while gate and not os.path.exists(gate):
                time.sleep(0.05)
            return super().finish(metadata, results)

    state = {f"layer{i}": torch.full((64, 64), value) for i in range(6)}
    dcp.save(state, storage_writer=SlowToFinish(path, single_file_per_rank=False, overwrite=True))
    print("saved", flush=True)
""")

# A save with use_collectives=False: each rank writes __<rank>.metadata for its own shards, no .metadata.
RANK_LOCAL_WRITER = textwrap.dedent("""
    import sys, warnings
    import torch
    import torch.distributed.checkpoint as dcp
    warnings.filterwarnings("ignore")
    dcp.save({f"layer{i}": torch.full((64, 64), float(sys.argv[2])) for i in range(6)},
             checkpoint_id=sys.argv[1], use_collectives=False, no_dist=True)
""")

READER = textwrap.dedent("""
    import json, sys, warnings
    import torch
    import torch.distributed.checkpoint as dcp
    warnings.filterwarnings("ignore")
    state = {f"layer{i}": torch.zeros((64, 64)) for i in range(6)}
    dcp.load(state, checkpoint_id=sys.argv[1])
    print(json.dumps(sorted({float(t.unique().item()) if t.unique().numel() == 1 else -1.0
                             for t in state.values()})))
""")


@pytest.fixture(scope="module")
def torch_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ensure_trainer_env()), PYTHONWARNINGS="ignore")


def save(env: dict[str, str], path: Path, value: float) -> None:
    subprocess.run([sys.executable, "-c", WRITER, str(path), str(value)], env=env, check=True,
                   capture_output=True, timeout=WAIT_SECONDS)


def loaded_values(env: dict[str, str], path: Path) -> list[float]:
    out = subprocess.run([sys.executable, "-c", READER, str(path)], env=env, check=True, capture_output=True,
                         text=True, timeout=WAIT_SECONDS).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_dcp_resave_in_place_is_never_published_mixed_and_replaces_the_old_one(
        tmp_path: Path, torch_env: dict[str, str]) -> None:
    src, dst = tmp_path / "cache" / "job", tmp_path / "checkpoints" / "job"
    src.mkdir(parents=True)
    ckpt = src / STEP
    save(torch_env, ckpt, 1.0)
    assert len(list(ckpt.glob("*.distcp"))) > 1, "several shards, so a mix is possible"
    mirror = Mirror(src, dst, completion=Completion.DCP, keep=2, workers=2, settle_seconds=0)

    gate = tmp_path / "finish-the-save"
    resave = subprocess.Popen([sys.executable, "-c", WRITER, str(ckpt), "2.0", str(gate)], env=torch_env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert resave.stdout is not None
        deadline = time.monotonic() + WAIT_SECONDS
        while "shards written" not in resave.stdout.readline():
            assert resave.poll() is None and time.monotonic() < deadline, "the re-save never wrote its shards"

        # New shards, old .metadata: it names every shard, yet this is not a checkpoint.
        during = mirror.sync_once()
        assert during.mirrored == [] and during.problems == []
        assert "newer than .metadata" in during.not_ready[STEP], during.not_ready
        assert list_mirrored(dst) == []

        gate.touch()
        assert resave.wait(timeout=WAIT_SECONDS) == 0
    finally:
        resave.kill()
        resave.wait()

    first = mirror.sync_once()
    assert [c.name for c in first.mirrored] == [STEP]
    assert loaded_values(torch_env, dst / STEP) == [2.0]

    # Saved again (a retried save): the published copy is replaced, whole, by the new one.
    save(torch_env, ckpt, 3.0)
    again = mirror.sync_once()
    assert [c.name for c in again.mirrored] == [STEP] and again.pruned == []
    assert [c.name for c in list_mirrored(dst)] == [STEP]
    assert loaded_values(torch_env, dst / STEP) == [3.0]
    assert mirror.sync_once().mirrored == [], "an unchanged source is not published again"
    assert not [p.name for p in dst.iterdir() if p.name.startswith(".")
                and p.name not in (".mirror.lock",)], "no staging or trash left"


@pytest.mark.parametrize("world_size, published", [(None, False), (2, False), (1, True)])
def test_rank_local_dcp_metadata_is_published_once_every_rank_of_the_job_wrote_its_own(
        tmp_path: Path, torch_env: dict[str, str], world_size: int | None, published: bool) -> None:
    src, dst = tmp_path / "cache" / "job", tmp_path / "checkpoints" / "job"
    src.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", RANK_LOCAL_WRITER, str(src / STEP), "4.0"], env=torch_env, check=True,
                   capture_output=True, timeout=WAIT_SECONDS)
    assert (src / STEP / "__0.metadata").exists() and not (src / STEP / ".metadata").exists()

    report = Mirror(src, dst, completion=Completion.AUTO, keep=2, workers=2, settle_seconds=0,
                    world_size=world_size).sync_once()

    if published:
        assert [c.name for c in report.mirrored] == [STEP]
        assert loaded_values(torch_env, dst / STEP) == [4.0]
    else:
        assert report.mirrored == []
        why = report.not_ready[STEP]
        assert ("__1.metadata" in why) if world_size else (str(src / STEP) in why and "world size" in why), why
