"""The mirror's liveness: /healthz answers 503 once the loop made no progress for `stuck_after` past the
time it was due, and /metrics is served beside it (with the last-pass and last-progress gauges)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from multinode.checkpoints import Completion
from multinode.metrics.mirror_metrics import MirrorMetrics
from multinode.mirror.liveness import HEALTH_PATH, Liveness, serve
from multinode.mirror.loop import MirrorLoop
from tests.unit.checkpoints import checkpoint_factory as make
from tests.unit.checkpoints.checkpoint_factory import Clock
from tests.unit.mirror.test_pins import FakeReporter


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_healthz_turns_503_when_the_loop_is_overdue_and_metrics_stay_served() -> None:
    clock = Clock(1000.0)
    liveness = Liveness(stuck_after=600, clock=clock)
    metrics = MirrorMetrics()
    server = serve(0, "127.0.0.1", metrics.registry, liveness)
    port = server.server_address[1]
    try:
        liveness.resting(30)             # between passes: due in 30 s, stuck 600 s after that
        clock.advance(629)
        assert get(port, HEALTH_PATH)[0] == 200
        clock.advance(2)
        status, words = get(port, HEALTH_PATH)
        assert status == 503 and "no progress for 631s" in words
        liveness.progressed()            # a file staged: alive again
        assert get(port, HEALTH_PATH)[0] == 200
        status, text = get(port, "/metrics")
        assert status == 200 and "multinode_mirror_last_pass_timestamp_seconds" in text
    finally:
        server.shutdown()
        server.server_close()


def test_a_long_pass_that_keeps_staging_files_is_alive(tmp_path: Path) -> None:
    """Progress inside a pass (each checkpoint scanned, each file staged) moves the liveness clock on, so
    copying a large checkpoint never looks stuck; and the gauges say when the last pass ended."""
    src, dst = tmp_path / "cache" / "llama", tmp_path / "checkpoints" / "llama"
    make.sharded(src, "checkpoint_0000100", shards=4)
    clock = Clock(0.0)
    liveness = Liveness(stuck_after=10, clock=clock)
    metrics = MirrorMetrics()
    beats: list[float] = []
    real = liveness.progressed

    def progressed() -> None:
        beats.append(clock())
        clock.advance(6)   # every step of the pass is slow; none is slower than stuck_after
        real()
    liveness.progressed = progressed  # type: ignore[method-assign]
    loop = MirrorLoop(source=src, dest=dst, reporter=FakeReporter({}), completion=Completion.AUTO, keep=1,
                      interval=30, settle=0, metrics=metrics, workers=1, liveness=liveness)

    loop.one_pass()

    assert len(beats) >= 6   # the status read, the scan, 5 files staged, the end of the pass
    assert liveness.check()[0]
    assert metrics.registry.get_sample_value("multinode_mirror_last_pass_timestamp_seconds") > 0
    assert metrics.registry.get_sample_value("multinode_mirror_interval_seconds") == 30
