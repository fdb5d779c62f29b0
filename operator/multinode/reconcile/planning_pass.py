"""One planning pass (plan.py): what it reads, and the Plan its policies' decisions are folded into."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from multinode.api import TrainingJob, TrainingJobStatus
from multinode.reconcile.decision import Decision, fold
from multinode.reconcile.integration import Gate
from multinode.reconcile.observed import Observed
from multinode.reconcile.outcome import Plan
from multinode.render import RenderSettings


@dataclass
class Pass:
    """One planning pass: what it reads, and the Plan (with the status) its decisions are folded into."""

    job: TrainingJob
    observed: Observed
    before: TrainingJobStatus
    now: datetime
    settings: RenderSettings
    result: Plan

    @property
    def status(self) -> TrainingJobStatus:
        return self.result.status

    def take(self, decision: Decision) -> Decision:
        """Fold `decision` into the pass; returned, to read its verdict or failure."""
        fold(self.result, decision, now=self.now, generation=self.job.metadata.generation)
        return decision


def with_gate_selectors(node_selector: Mapping[str, str] | None, gates: Iterable[Gate]) -> dict[str, str] | None:
    """The attempt's node selector with each gate's (a queue's contract: Kueue's admitted flavors select the
    nodes)."""
    merged = dict(node_selector) if node_selector is not None else None
    for gate in gates:
        if gate.node_selector:
            merged = {**(merged or {}), **gate.node_selector}
    return merged
