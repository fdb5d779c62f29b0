"""Progress heartbeats: the one line a trainer prints so the operator can tell a hang from a slow step.

Stdlib only, and importing nothing else of multinode, so a trainer can `import multinode.progress` or copy
this file into its own code. The operator reads the line back from the trainer container's log (with the
same `parse_heartbeat`), so the writer and the reader cannot disagree on the format:

    <marker> step=<int> [step_seconds=<float>] [samples_per_second=<float>]

The marker comes from the MULTINODE_PROGRESS_MARKER environment variable, which the operator sets in every
trainer container (docs/env.md). Outside a multinode pod (the variable unset) `heartbeat` prints nothing,
so a script runs unchanged on a laptop.

    from multinode.progress import heartbeat
    for step in range(start, steps):
        t0 = time.monotonic()
        loss = train_step(batch)          # this rank's own compute, before it waits for the others
        heartbeat(step, step_seconds=time.monotonic() - t0)

With restartStrategy InPlace, `leave_on_new_attempt()` at the start of a trainer ends its process as soon as
the operator declares a new attempt (a peer's process failed): the pod restarts in place at once, instead of
when a collective notices the peer is gone (seconds, or NCCL's watchdog timeout).

The operator may also ask for a checkpoint now (a node of the job is being drained, or `multinode checkpoint`):
`CheckpointRequests` tells a trainer so (docs/checkpoints.md). Ranks must agree before a collective save, as
each reads the file on its own: all-reduce the answer (max) first, as examples/real/train.py does.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

MARKER_ENV = "MULTINODE_PROGRESS_MARKER"
REQUEST_FILE_ENV = "MULTINODE_CHECKPOINT_REQUEST_FILE"
# failurePolicy.restartStrategy InPlace: the file the pod's current attempt is in (a downward API file of its
# annotation), and the exit code `leave_on_new_attempt` ends the process with (EX_TEMPFAIL).
ATTEMPT_FILE_ENV = "MULTINODE_ATTEMPT_FILE"
NEW_ATTEMPT_EXIT_CODE = 75
# The reason of a request made because a node of the job is cordoned (api.conditions.Reason.NODE_CORDONED;
# this file imports nothing of multinode, and tests/unit/mirror/test_request_relay.py checks the two agree).
DRAIN_REASON = "NodeCordoned"
# What the operator puts in MARKER_ENV: unlikely to appear in a trainer's own output by accident.
MARKER = "[multinode-progress]"
# At most one line per this many seconds from one process: a 20-steps-a-second trainer must not flood its
# log (the operator polls every few seconds; the newest step is what counts).
MIN_INTERVAL_SECONDS = 1.0

_last_printed: float | None = None


@dataclass(frozen=True)
class Heartbeat:
    step: int
    step_seconds: float | None = None
    samples_per_second: float | None = None


def format_heartbeat(marker: str, beat: Heartbeat) -> str:
    parts = [marker, f"step={beat.step}"]
    if beat.step_seconds is not None:
        parts.append(f"step_seconds={beat.step_seconds:.6g}")
    if beat.samples_per_second is not None:
        parts.append(f"samples_per_second={beat.samples_per_second:.6g}")
    return " ".join(parts)


def heartbeat(step: int, *, step_seconds: float | None = None, samples_per_second: float | None = None,
              stream: TextIO | None = None, min_interval: float = MIN_INTERVAL_SECONDS) -> bool:
    """Report that this rank finished `step`. `step_seconds` is this rank's own time in the step (its
    compute, before it waits in a collective): the operator compares it across ranks to find stragglers.
    Returns whether a line was printed (rate-limited to one per `min_interval` seconds; 0 prints every call)."""
    global _last_printed  # noqa: PLW0603 - one rate limit per process, as the trainer calls it from anywhere
    marker = os.environ.get(MARKER_ENV, "")
    if not marker:
        return False
    now = time.monotonic()
    if _last_printed is not None and now - _last_printed < min_interval:
        return False
    _last_printed = now
    out = stream if stream is not None else sys.stdout
    out.write(format_heartbeat(marker, Heartbeat(int(step), step_seconds, samples_per_second)) + "\n")
    out.flush()  # a rank that hangs next must still have shown this step
    return True


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def parse_heartbeat(line: str, marker: str = MARKER) -> Heartbeat | None:
    """The heartbeat in `line`, or None. The marker may come after a prefix (torchrun's `[default0]:`, a
    logging format); unknown keys are ignored, so later versions may add some; a line without a valid
    `step` is not a heartbeat."""
    at = line.find(marker)
    if at < 0:
        return None
    fields: dict[str, str] = {}
    for token in line[at + len(marker):].split():
        key, sep, value = token.partition("=")
        if sep:
            fields.setdefault(key, value)
    step = fields.get("step", "")
    if not step.isdigit():
        return None
    return Heartbeat(int(step), _number(fields.get("step_seconds", "x")),
                     _number(fields.get("samples_per_second", "x")))


class CheckpointRequests:
    """The operator's checkpoint requests, read from the file the job's mirror writes the newest request id
    into (MULTINODE_CHECKPOINT_REQUEST_FILE; unset outside a multinode pod or without spec.checkpointing:
    never a request). A request made before this object was created is taken as seen: a new attempt resumes
    from the checkpoint that answered it."""

    def __init__(self, path: str | None = None):
        self.path = path if path is not None else os.environ.get(REQUEST_FILE_ENV, "")
        # Why the newest request was made, as the file says (each read sets it): NodeCordoned (the gang is about
        # to move off a node: work after the checkpoint is lost) or UserRequested; "" before any.
        self.reason = ""
        self._seen = self._read()

    def _read(self) -> str:
        if not self.path:
            return ""
        try:
            with open(self.path, encoding="utf-8") as f:
                lines = f.read(1024).splitlines()
        except (OSError, UnicodeDecodeError):
            return ""   # no request yet, or the volume is away for a moment: ask again next step
        if not lines:
            return ""
        self.reason = lines[1].strip() if len(lines) > 1 else ""
        return lines[0].strip()

    def pending(self) -> bool:
        """Whether a request came that this process has not saved for yet: one small read, every step is fine."""
        current = self._read()
        return bool(current) and current != self._seen

    @property
    def moving(self) -> bool:
        """The newest request came because the gang is about to move (a node of it is being drained): steps
        after its checkpoint would be lost."""
        return self.reason == DRAIN_REASON

    def saved(self) -> None:
        """A checkpoint was saved: every request up to now is answered."""
        self._seen = self._read() or self._seen


def _attempt_in(path: str) -> int | None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(32).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def leave_on_new_attempt(*, poll_seconds: float = 0.5,
                         leave: Callable[[int], object] = os._exit) -> threading.Thread | None:
    """Watch the pod's attempt (MULTINODE_ATTEMPT_FILE, set with restartStrategy InPlace) from a daemon thread,
    and end the process with NEW_ATTEMPT_EXIT_CODE when it moves past this process's MULTINODE_ATTEMPT: the
    operator declared a new attempt, so this one is over, even if the main thread waits in a collective for a
    peer that is gone. The pod then restarts in place into the new attempt. None (nothing watched) outside such
    a pod."""
    path = os.environ.get(ATTEMPT_FILE_ENV, "")
    mine = os.environ.get("MULTINODE_ATTEMPT", "")
    if not path or not mine.isdigit():
        return None

    def watch() -> None:
        while True:
            current = _attempt_in(path)
            if current is not None and current > int(mine):
                print(f"multinode: attempt {current} declared; leaving attempt {mine}", file=sys.stderr, flush=True)
                leave(NEW_ATTEMPT_EXIT_CODE)
                return
            time.sleep(poll_seconds)

    thread = threading.Thread(target=watch, name="multinode-attempt", daemon=True)
    thread.start()
    return thread
