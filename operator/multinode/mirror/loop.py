"""The mirror pod's main loop: sync, report what changed, and do the final sync when the job asks.

Each pass reads the job's status (its only way to learn anything from the operator):
- `resumedFrom` names the checkpoint the running attempt resumed from, and `resumedBy` those other jobs'
  running attempts resumed from (the operator writes both): the engine neither prunes nor replaces them.
  Pins fail closed: when the status cannot be read, or `resumedBy` is full (there may be more), the pass
  still copies, but prunes and replaces nothing (problem PinnedUnknown);
- condition CheckpointsSynced=False with reason FinalSyncRequested means training ended: one last pass
  with final=True (the newest DeepSpeed/HF checkpoint counts without waiting to settle), then
  status.checkpoints.finalSyncTime is written and the process exits 0.
Status is patched only when something a user would see changed, not every pass; every value is fitted to
the CRD's bounds first (a directory name longer than a status field allows would fail every patch).
"""

from __future__ import annotations

import logging
import os
import posixpath
import threading
import time
from pathlib import Path
from typing import Any

from multinode.api.base import MAX_NAME_LENGTH, MAX_PATH_LENGTH
from multinode.api.checkpointing import (CHECKPOINT_REQUEST_FILE, MAX_NOT_READY_MESSAGE, MAX_NOT_READY_REPORTED,
                                        MAX_RESUMED_BY)
from multinode.api.conditions import ConditionType, Reason
from multinode.checkpoints import Completion, IncompleteCheckpoint, Mirror, MirroredCheckpoint, SyncReport
from multinode.checkpoints.manifest import rfc3339
from multinode.checkpoints.waiting import DEFAULT_STALLED_SECONDS
from multinode.metrics.mirror_metrics import MirrorMetrics
from multinode.mirror.liveness import Liveness
from multinode.mirror.reporter import JobGone, StatusReporter

log = logging.getLogger("multinode.mirror")
# The CRD's bounds of what the mirror writes (api/checkpointing.py): longer values fail the whole patch.
MAX_PROBLEM_REASON, MAX_PROBLEM_MESSAGE = 128, 4096
INT64_MAX = 2**63 - 1


class PinsUnknown(Exception):
    """The mirror cannot tell which checkpoints are in use: it prunes and replaces none."""


def fit(text: str, limit: int) -> str:
    """`text` as a status string: valid UTF-8 (a file name's undecodable bytes become U+FFFD) and at most
    `limit` characters, cut with an ellipsis."""
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def fit_int(value: int | None) -> int | None:
    """An integer the apiserver takes (int64); a step from a name with 20 digits is not one."""
    return value if value is None or 0 <= value <= INT64_MAX else None


def now_rfc3339() -> str:
    return rfc3339(time.time())


def final_sync_requested(status: dict[str, Any]) -> bool:
    for condition in status.get("conditions") or []:
        if condition.get("type") == ConditionType.CHECKPOINTS_SYNCED:
            return condition.get("status") == "False" and condition.get("reason") == Reason.FINAL_SYNC_REQUESTED
    return False


def relay_checkpoint_request(status: dict[str, Any], dest: Path) -> str | None:
    """Write the id and reason of the job's checkpoint request (status.checkpointRequest, the operator's), one
    a line, into the file the trainers read (CHECKPOINT_REQUEST_FILE in `dest`), when they changed:
    atomically, so a trainer reads the old request or the new one, never half. Returns the id written, or
    None."""
    request = status.get("checkpointRequest") or {}
    request_id, reason = str(request.get("id") or ""), str(request.get("reason") or "")
    if not request_id:
        return None
    content = f"{request_id}\n{reason}\n"
    target = dest / CHECKPOINT_REQUEST_FILE
    try:
        if target.read_text(encoding="utf-8") == content:
            return None
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    staged = dest / f"{CHECKPOINT_REQUEST_FILE}.tmp"
    staged.write_text(content, encoding="utf-8")
    os.replace(staged, target)
    return request_id


def pinned_names(status: dict[str, Any], dest: Path) -> set[str]:
    """Our checkpoints in use: the one the running attempt resumed from, and those other jobs' running
    attempts resumed from (status.resumedBy). Raises PinsUnknown when resumedBy is full: it may not say all."""
    resumed_by = status.get("resumedBy") or []
    if len(resumed_by) >= MAX_RESUMED_BY:
        raise PinsUnknown(f"status.resumedBy lists {len(resumed_by)} checkpoints, as many as it can hold")
    paths = [status.get("resumedFrom"), *((entry or {}).get("path") for entry in resumed_by)]
    ours = str(dest).rstrip("/")
    return {posixpath.basename(p.rstrip("/")) for p in paths if p and posixpath.dirname(p.rstrip("/")) == ours}


def checkpoint_status(checkpoint: MirroredCheckpoint) -> dict[str, Any]:
    return {"name": fit(checkpoint.name, MAX_NAME_LENGTH), "path": fit(str(checkpoint.path), MAX_PATH_LENGTH),
            "step": fit_int(checkpoint.step), "bytes": fit_int(checkpoint.total_bytes) or 0,
            "mirroredAt": checkpoint.mirrored_at}


def not_ready_status(incomplete: list[IncompleteCheckpoint]) -> list[dict[str, Any]]:
    """The newest incomplete checkpoints, newest first, as status.checkpoints.notReady lists them."""
    newest = incomplete[::-1][:MAX_NOT_READY_REPORTED]
    entries = [{"name": fit(c.name, MAX_NAME_LENGTH), "step": fit_int(c.step), "reason": str(c.reason),
                "message": fit(c.message, MAX_NOT_READY_MESSAGE), "since": rfc3339(c.since)} for c in newest]
    return [{k: v for k, v in e.items() if v is not None} for e in entries]   # no step: no key


def status_update(reported: dict[str, Any], report: SyncReport, mirrored_total: int) -> dict[str, Any] | None:
    """What to merge into status.checkpoints after a pass, or None when nothing visible changed."""
    update: dict[str, Any] = {}
    latest = checkpoint_status(report.latest) if report.latest else None
    if latest != reported.get("latest"):
        update["latest"] = latest
    if report.mirrored:
        update["mirrored"] = mirrored_total
        update["lastSyncTime"] = report.mirrored[-1].mirrored_at
    problem = report.problems[-1] if report.problems else None
    old_problem = reported.get("problem")
    if problem is None and old_problem is not None:
        update["problem"] = None  # merge patch: removes it
    elif problem is not None and (old_problem is None or (old_problem["reason"], old_problem["message"]) !=
                                  (fit(problem.reason, MAX_PROBLEM_REASON), fit(problem.message, MAX_PROBLEM_MESSAGE))):
        update["problem"] = {"reason": fit(problem.reason, MAX_PROBLEM_REASON),
                             "message": fit(problem.message, MAX_PROBLEM_MESSAGE), "time": now_rfc3339()}
    not_ready = not_ready_status(report.incomplete)
    if report.scanned and not_ready != (reported.get("notReady") or []):
        update["notReady"] = not_ready or None   # merge patch: None removes the list
    return update or None


class MirrorLoop:
    def __init__(self, *, source: Path, dest: Path, reporter: StatusReporter, completion: Completion, keep: int,
                 interval: float, settle: float, metrics: MirrorMetrics, workers: int = 8,
                 world_size: int | None = None, stalled_seconds: float = DEFAULT_STALLED_SECONDS,
                 liveness: Liveness | None = None):
        self.reporter = reporter
        self.dest = dest
        self.interval = interval
        self.metrics = metrics
        self.liveness = liveness or Liveness()
        self.stopping = threading.Event()
        self._pinned: set[str] | None = None   # None: unknown (the status could not be read this pass)
        self._pins_unknown = "the job's status was not read yet"
        self.engine = Mirror(source, dest, completion=completion, keep=keep, workers=workers,
                             settle_seconds=settle, pinned=self._pins, log=log, world_size=world_size,
                             stalled_seconds=stalled_seconds, progress=self._progressed)
        self.metrics.interval.set(interval)
        self._reported: dict[str, Any] = {}
        self._mirrored_total = 0

    def _pins(self) -> set[str]:
        if self._pinned is None:
            raise PinsUnknown(self._pins_unknown)
        return set(self._pinned)

    def _progressed(self) -> None:
        self.liveness.progressed()
        self.metrics.progressed()

    def run(self) -> int:
        """Loop until the final sync is done (exit 0), the job is gone (0), or SIGTERM (0)."""
        try:
            self._reported = dict(self.reporter.read_status().get("checkpoints") or {})
            self._mirrored_total = int(self._reported.get("mirrored") or 0)
            while not self.stopping.is_set():
                if self.one_pass():
                    return 0
                self.liveness.resting(self.interval)
                self.stopping.wait(self.interval)
        except JobGone:
            log.info("the job is gone; nothing left to mirror for")
        return 0

    def one_pass(self) -> bool:
        """One sync pass; True when it was the final one."""
        try:
            status = self.reporter.read_status()
            self._pinned = pinned_names(status, self.dest)
        except JobGone:
            raise
        except PinsUnknown as e:
            self._pinned, self._pins_unknown = None, str(e)
        except Exception as e:  # noqa: BLE001 - the API being away must not stop the copying
            log.warning("cannot read the job status (%s); syncing without it, pruning and replacing nothing", e)
            status, self._pinned, self._pins_unknown = {}, None, f"the job's status could not be read: {e}"
        self._progressed()
        try:  # first: a trainer asked to checkpoint must not wait for this pass's copies
            if (relayed := relay_checkpoint_request(status, self.dest)) is not None:
                log.info("relayed checkpoint request %s to the trainers", relayed)
        except OSError as e:
            log.warning("cannot relay the checkpoint request (%s); will try again", e)
        final = final_sync_requested(status)
        report = self.engine.sync_once(final=final)
        self.metrics.record(report)
        self.liveness.progressed()
        self._mirrored_total += len(report.mirrored)
        update = status_update(self._reported, report, self._mirrored_total) or {}
        if final:
            update["finalSyncTime"] = now_rfc3339()
        if update:
            try:
                self.reporter.report(update)
                self._reported.update(update)
            except JobGone:
                raise
            except Exception as e:  # noqa: BLE001 - retried next pass
                log.warning("cannot report status (%s); will try again", e)
                return False
        if final:
            log.info("final sync done: %s", (update.get("latest") or self._reported.get("latest") or {}).get("name"))
        return final
