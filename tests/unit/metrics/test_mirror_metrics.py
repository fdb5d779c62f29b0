"""The mirror's metrics: checkpoints not ready are counted by reason code, never by directory."""

from __future__ import annotations

from multinode.checkpoints import IncompleteCheckpoint, NotReady, SyncReport
from multinode.metrics.mirror_metrics import MirrorMetrics


def not_ready(metrics: MirrorMetrics) -> dict[str, float]:
    return {s.labels["reason"]: s.value for family in metrics.registry.collect()
            if family.name == "multinode_mirror_not_ready_checkpoints" for s in family.samples}


def waiting(name: str, reason: NotReady) -> IncompleteCheckpoint:
    return IncompleteCheckpoint(name=name, step=None, reason=reason, message=f"/cache/job/{name}: ...", since=0.0)


def test_not_ready_checkpoints_are_a_gauge_by_reason_with_every_code_present() -> None:
    metrics = MirrorMetrics(not_ready_reasons=[reason.value for reason in NotReady])
    assert not_ready(metrics) == {reason.value: 0.0 for reason in NotReady}

    metrics.record(SyncReport(scanned=True, incomplete=[waiting("step-100", NotReady.BEING_REWRITTEN),
                                                        waiting("step-200", NotReady.WAITING_FOR_RANK_FILES),
                                                        waiting("step-300", NotReady.WAITING_FOR_RANK_FILES)]))
    counts = not_ready(metrics)
    assert set(counts) == {reason.value for reason in NotReady}   # bounded: the codes, no directory names
    assert {r: v for r, v in counts.items() if v} == {"BeingRewritten": 1.0, "WaitingForRankFiles": 2.0}

    metrics.record(SyncReport(scanned=False))   # a pass that could not read the cache says nothing new
    assert not_ready(metrics) == counts
    metrics.record(SyncReport(scanned=True))
    assert not any(not_ready(metrics).values())
