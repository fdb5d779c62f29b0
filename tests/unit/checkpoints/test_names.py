from __future__ import annotations

import pytest

from multinode.checkpoints.names import never_taken, parse_step


@pytest.mark.parametrize(("name", "step"), [
    ("checkpoint_0001000", 1000),
    ("checkpoint-500", 500),
    ("global_step100", 100),
    ("iter_0000100", 100),
    ("step-300", 300),
    ("1200", 1200),
    ("1200.orbax-checkpoint-tmp-1795216897", 1200),
    ("tmp-checkpoint-40", 40),
    ("megatron_gpt--val_loss=1.50-step=1000-consumed_samples=8000.0", 1000),
    ("release", None),
    ("best", None),
    ("epoch-final", None),
])
def test_the_step_comes_from_the_name(name: str, step: int | None) -> None:
    assert parse_step(name) == step


@pytest.mark.parametrize("name", [
    "checkpoint_0001000.tmp", "tmp-checkpoint-500", "100.orbax-checkpoint-tmp-1795216897",
    "megatron_gpt--step=100-unfinished", ".hidden", ".staging-checkpoint_1-ab12",
])
def test_temporary_and_hidden_names_are_never_taken(name: str) -> None:
    assert never_taken(name)


@pytest.mark.parametrize("name", ["checkpoint_0001000", "global_step5", "step-3", "7", "checkpoint-9"])
def test_ordinary_names_are_fine(name: str) -> None:
    assert never_taken(name) is None
