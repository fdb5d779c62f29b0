"""The checkpoints of the cache that are not complete yet: since when, and whether the newest is stuck.

A checkpoint directory may stay incomplete for good: a save crashed, a rank never wrote its files, the
mirror lacks the job's world size. Only the newest one matters for resuming, so it alone is called
*stalled*, once it has been incomplete and unchanged (no file written, grown or touched) for
`stalled_seconds`: a save that is still writing is never stalled, however long it takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from multinode.checkpoints.reasons import NotReady, RefusedEntry
from multinode.checkpoints.scan import CheckpointCandidate
from multinode.checkpoints.settle import SettleTracker
from multinode.checkpoints.tree import take_snapshot

DEFAULT_STALLED_SECONDS = 1800.0


@dataclass(frozen=True)
class IncompleteCheckpoint:
    """A checkpoint directory in the cache that is not complete (yet)."""

    name: str
    step: int | None
    reason: NotReady
    message: str     # names the directory and the detail: which file is newer, which ranks are missing
    since: float     # wall clock of the first pass (of this mirror) that saw it incomplete


class IncompleteTracker:
    """Remembers, across passes, since when each checkpoint has been incomplete."""

    def __init__(self, stalled_seconds: float = DEFAULT_STALLED_SECONDS) -> None:
        self.stalled_seconds = stalled_seconds
        self._since: dict[str, float] = {}
        self._unchanged = SettleTracker()   # the settle rule's bookkeeping, for the newest one only

    def observe(self, candidates: Sequence[CheckpointCandidate], now: float) -> list[IncompleteCheckpoint]:
        """The incomplete ones among `candidates` (a scan's result, oldest first), in the same order."""
        incomplete = [c for c in candidates if not c.complete]
        self._since = {c.name: self._since.get(c.name, now) for c in incomplete}
        result = []
        for c in incomplete:
            assert c.reason is not None, "CheckpointCandidate requires a reason of an incomplete one"
            result.append(IncompleteCheckpoint(c.name, c.step, NotReady(c.reason), f"{c.path}: {c.why}",
                                               self._since[c.name]))
        return result

    def stalled(self, candidates: Sequence[CheckpointCandidate], now: float) -> str | None:
        """A message when the newest candidate is incomplete and has not changed for `stalled_seconds`
        (`now`: the mirror's monotonic clock, which observe's `since` is not)."""
        newest = candidates[-1] if candidates else None
        if newest is None or newest.complete:
            self._unchanged.retain([])
            return None
        self._unchanged.retain([newest.name])
        try:
            snapshot = take_snapshot(newest.path)
        except (OSError, RefusedEntry):   # vanished, unreadable or refused (reported as such): looked at again
            return None
        unchanged, _ = self._unchanged.check(newest.name, snapshot, now, self.stalled_seconds)
        if not unchanged:
            return None
        # No running count in the words: the status is patched only when the message changes.
        return (f"the newest checkpoint, {newest.path}, is not complete and nothing in it changed for "
                f">= {self.stalled_seconds:g}s: {newest.reason}: {newest.why}")
