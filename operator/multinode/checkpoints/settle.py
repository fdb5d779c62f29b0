"""The settle rule: a checkpoint whose marker is written before every rank finished counts as complete
only once its files have stopped changing.

DeepSpeed writes `latest` before the final barrier, and HF Trainer writes `trainer_state.json` with no
barrier before it on multi-node runs: either may name a checkpoint whose other shards are still being
written. "Unchanged" means that the (relative path, size, mtime_ns) snapshot of the directory is identical
across two looks at least `settle_seconds` apart. A `SettleTracker` remembers the first time each
snapshot was seen; the `Mirror` keeps one for its lifetime, on its own monotonic clock.

One clock per comparison: file times come from the clock of whoever wrote the file (the trainer's node,
the file server), the looks from the mirror's, and the two never meet. Without a tracker (a one-off scan)
there is only one look, so file times are compared with file times: the checkpoint has settled once the
cache holds a write at least `settle_seconds` newer than its own newest (the trainer moved on).
"""

from __future__ import annotations

from collections.abc import Iterable

from multinode.checkpoints.tree import Snapshot


class SettleTracker:
    """Per checkpoint name: the digest of its last snapshot and when that snapshot was first seen."""

    def __init__(self) -> None:
        self._first_seen: dict[str, tuple[str, float]] = {}

    def check(self, name: str, snapshot: Snapshot, now: float, settle_seconds: float) -> tuple[bool, str]:
        """Whether `name` has been unchanged for `settle_seconds`, and words that say how long."""
        seen = self._first_seen.get(name)
        if seen is None or seen[0] != snapshot.digest:
            self._first_seen[name] = (snapshot.digest, now)
            words = "first look" if seen is None else "changed since the last look"
            return settle_seconds <= 0, words
        unchanged = now - seen[1]
        return unchanged >= settle_seconds, f"unchanged for {unchanged:.0f}s"

    def retain(self, names: Iterable[str]) -> None:
        """Forget checkpoints that are gone, so memory stays bounded over a long job."""
        keep = set(names)
        for name in [n for n in self._first_seen if n not in keep]:
            del self._first_seen[name]


def settled_by_later_writes(snapshot: Snapshot, cache_newest_mtime_ns: int, settle_seconds: float) -> tuple[bool, str]:
    """The stateless variant: the cache's newest write (any checkpoint, any tracker) is at least
    `settle_seconds` newer than this checkpoint's newest. Both are file times, from the same clocks."""
    later = (cache_newest_mtime_ns - snapshot.newest_mtime_ns) / 1e9
    if later <= 0:
        return False, "nothing in the cache was written after it yet"
    return later >= settle_seconds, f"the cache's newest write is {later:.0f}s newer than its last change"
