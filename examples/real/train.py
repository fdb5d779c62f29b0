"""A small real training run for CPU nodes: DDP over gloo, DCP checkpoints, resume after a restart.

The operator's env gives torchrun every flag it needs (PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
PET_MASTER_ADDR, PET_MASTER_PORT; for an elastic job PET_NNODES=<min>:<max> and the PET_RDZV_* of a c10d
rendezvous; see docs/env.md), so on a node this is just:

    python3 -m torch.distributed.run examples/real/train.py

Settings (env): TRAIN_STEPS (20), STEP_SECONDS (0, a sleep per step to make runs long), COLLECTIVE_TIMEOUT_SECONDS
(60, elastic jobs only: a collective waiting longer for a peer fails, and torchrun regroups the ranks left),
CHECKPOINT_EVERY (5; 0: only when the operator asks), DRAIN_HOLD_SECONDS (60: how long to stop after a
checkpoint asked for a drain, while the operator moves the gang), MULTINODE_CHECKPOINT_DIR (./checkpoints),
MULTINODE_RESUME_FROM (empty: fresh start).

Resume: from MULTINODE_RESUME_FROM (the operator's choice, the same on every node). When torchrun itself
restarted the workers (TORCHELASTIC_RESTART_COUNT > 0: a peer came or went in an elastic job) or the job is
elastic (PET_NNODES=<min>:<max>: a node joining a running job), this job's own checkpoints may be newer:
rank 0 picks the newest complete one in MULTINODE_CHECKPOINT_DIR (a `step-<n>` directory with
DCP's `.metadata`, which dcp.save writes last) if its step is above the one in MULTINODE_RESUME_FROM's
name, and every rank loads that. DCP reshards on load, so the world size may differ from the one that saved.
Batches depend on (step, rank) only. A static job's first start keeps to MULTINODE_RESUME_FROM, which the
operator reports as status.resumedFrom.
Every rank prints `attempt=<a> rank=<r> world=<w> restart=<torchrun's restart count>` at start,
`resumed_from=<path> step=<n> rank=<r> world=<w>` after a resume,
`step=<n> rank=<r> loss=<x>` each step and `done step=<n> rank=<r>` at the end, and a
progress heartbeat (multinode.progress, for spec.hangDetection) with its own compute time for the step. When
the operator asks for a checkpoint (a node being drained, `multinode checkpoint`), every rank saves at the end
of the step it is in: `checkpoint=<path> requested rank=<r>`; for a drain it then holds (trains no further)
until the operator moves the gang.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

from multinode.progress import CheckpointRequests, heartbeat, leave_on_new_attempt

FEATURES = 16
BATCH = 32


def log(line: str) -> None:
    # flush: a rank that hangs later must still have shown how far it got.
    print(line, flush=True)


def env_number(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    return float(value) if value else default


def check_allreduce(rank: int, world: int) -> bool:
    """Sum the ranks once before training: proves every rank reaches every other over gloo."""
    total = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(total)
    expected = world * (world - 1) // 2
    log(f"allreduce_sum={total.item()} expected={expected} rank={rank} world={world}")
    return total.item() == expected


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic data from a seed per (step, rank): a resumed run sees the batches it would have seen."""
    gen = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(BATCH, FEATURES, generator=gen)
    target = x.sum(dim=1, keepdim=True).sin()  # a fixed function for the model to learn
    return x, target


def checkpoint_step(path: str) -> int:
    """The step in a checkpoint's name (`step-<n>`); 0 for another name (a base model, another layout)."""
    found = re.fullmatch(r"step-(\d+)", os.path.basename(os.path.normpath(path))) if path else None
    return int(found.group(1)) if found else 0


def newest_checkpoint(root: str) -> str:
    """The newest complete DCP checkpoint this job saved in `root`, or "". Complete: `.metadata` is there,
    which dcp.save writes last (via a rename) once every rank wrote its shard; a save cut short has none."""
    try:
        names = os.listdir(root)
    except OSError:
        return ""
    done = [os.path.join(root, n) for n in names
            if checkpoint_step(n) > 0 and os.path.isfile(os.path.join(root, n, ".metadata"))]
    return max(done, key=checkpoint_step, default="")


def choose_resume(resume_from: str, save_root: str, rank: int) -> str:
    """Collective: the checkpoint every rank resumes from. torchrun restarted the workers (a peer came or
    went) or the job is elastic: the newest complete one in the cache if it is newer than `resume_from`.
    Rank 0 looks and tells the others, so all load the same one even while the shared cache changes."""
    restarted = int(env_number("TORCHELASTIC_RESTART_COUNT", 0)) > 0
    elastic = torch.tensor([int(restarted or ":" in os.environ.get("PET_NNODES", ""))])
    dist.all_reduce(elastic, op=dist.ReduceOp.MAX)  # a node that just joined may be the only rank not restarted
    if not elastic.item():
        return resume_from
    choice = [resume_from]
    if rank == 0:
        newest = newest_checkpoint(save_root)
        if newest and checkpoint_step(newest) > checkpoint_step(resume_from):
            choice = [newest]
    dist.broadcast_object_list(choice, src=0)
    return choice[0]


def checkpoint_state(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> dict:
    # get_state_dict gives DCP the model and optimizer state keyed by parameter name (not by the ids
    # optimizer.state_dict() uses), so a checkpoint loads into a fresh model in a new process.
    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optim_state, "step": torch.tensor(step)}


def save(state: dict, path: str, rank: int) -> None:
    # After a resume, the attempt before may have left this step's checkpoint. DCP would rewrite its
    # shards in place under the old .metadata, so the folder would look complete to the mirror while
    # half-written. Rank 0 removes it (the cache is shared) and no rank writes before that.
    if rank == 0 and os.path.exists(path):
        shutil.rmtree(path)
    dist.barrier()
    # Collective: every rank writes its shard, then rank 0 writes .metadata last (via a rename),
    # which is what marks a DCP checkpoint complete for the mirror.
    dcp.save(state, checkpoint_id=path)


def hold(requests: CheckpointRequests, seconds: float, rank: int) -> None:
    """Train no further while the operator moves the gang (it deletes these pods once the checkpoint is
    mirrored); go on after `seconds` if it does not (the drain was called off), or at a newer request."""
    log(f"holding for the move rank={rank}")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not requests.pending():
        time.sleep(0.5)
    log(f"holding over rank={rank}")


def main() -> int:
    steps = int(env_number("TRAIN_STEPS", 20))
    step_seconds = env_number("STEP_SECONDS", 0)
    every = int(env_number("CHECKPOINT_EVERY", 5))
    hold_seconds = env_number("DRAIN_HOLD_SECONDS", 60)
    save_root = os.environ.get("MULTINODE_CHECKPOINT_DIR") or "checkpoints"
    resume_from = os.environ.get("MULTINODE_RESUME_FROM", "")  # empty on a first start

    # restartStrategy InPlace: leave this attempt as soon as the operator declares the next (a peer failed),
    # even from the middle of a collective or the rendezvous; the pod then restarts in place.
    leave_on_new_attempt()
    # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for us (env:// rendezvous). An elastic job
    # bounds each collective (COLLECTIVE_TIMEOUT_SECONDS, 60): a peer whose machine froze closes no socket,
    # and gloo would wait for it 30 minutes before torchrun regroups the ranks left.
    elastic = ":" in os.environ.get("PET_NNODES", "")
    timeout = timedelta(seconds=env_number("COLLECTIVE_TIMEOUT_SECONDS", 60)) if elastic else None
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    # The operator's attempt: a gang restarted in place (restartStrategy InPlace) reads the new one here.
    log(f"attempt={os.environ.get('MULTINODE_ATTEMPT', '')} rank={rank} world={world} "
        f"restart={os.environ.get('TORCHELASTIC_RESTART_COUNT', '')}")
    if not check_allreduce(rank, world):
        dist.destroy_process_group()
        return 1

    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 1)))
    # Adam, not plain SGD: it has per-parameter state, so the checkpoint really carries optimizer state.
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.MSELoss()

    start = 1
    resume_from = choose_resume(resume_from, save_root, rank)
    if resume_from:
        # DCP loads in place: build the state dict first (get_state_dict creates Adam's state), let
        # dcp.load fill it (every rank reads the same checkpoint, whatever world size saved it), then hand
        # it back. With plain DDP the tensors are the live ones already; with FSDP set_state_dict is what
        # applies them.
        state = checkpoint_state(model, optimizer, 0)
        dcp.load(state, checkpoint_id=resume_from)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        done = int(state["step"])
        log(f"resumed_from={resume_from} step={done} rank={rank} world={world}")
        start = done + 1

    requests = CheckpointRequests()
    step = start - 1
    for step in range(start, steps + 1):
        started = time.monotonic()
        x, target = batch(step, rank)
        optimizer.zero_grad()
        loss = loss_fn(model(x), target)
        # This rank's own work (data and forward): backward includes DDP's all-reduce, where a fast rank
        # waits for a slow one, so it would make every rank look as slow as the slowest.
        own_seconds = time.monotonic() - started
        loss.backward()  # DDP all-reduces the gradients here, over gloo
        optimizer.step()
        log(f"step={step} rank={rank} loss={loss.item():.6f}")
        # One line for the operator: this step is done (a hang is no new step for hangDetection.timeoutSeconds).
        heartbeat(step, step_seconds=own_seconds)
        # Each rank reads the request file on its own: they agree (max) before the collective save.
        asked = torch.tensor([int(requests.pending())])
        dist.all_reduce(asked, op=dist.ReduceOp.MAX)
        if (every > 0 and step % every == 0) or asked.item():
            path = os.path.join(save_root, f"step-{step}")
            save(checkpoint_state(model, optimizer, step), path, rank)
            requests.saved()
            if asked.item():
                log(f"checkpoint={path} requested rank={rank}")
                if requests.moving:  # the gang is about to move off a drained node: later steps would be lost
                    hold(requests, hold_seconds, rank)
        if step_seconds > 0:
            time.sleep(step_seconds)

    log(f"done step={step} rank={rank}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
