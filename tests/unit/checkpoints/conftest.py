from __future__ import annotations

from pathlib import Path

import pytest

from multinode.checkpoints import Mirror
from tests.unit.checkpoints.checkpoint_factory import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "cache" / "job"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def dst(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints" / "job"


@pytest.fixture
def make_mirror(src: Path, dst: Path, clock: Clock):
    def make(**kwargs) -> Mirror:
        kwargs.setdefault("keep", 100)
        kwargs.setdefault("workers", 4)
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("monotonic", clock)   # the settle rule and the dedupe identities move with it too
        return Mirror(src, dst, **kwargs)
    return make
