"""The mirror pod's main loop: sync, report what changed, and do the final sync when the job asks.

Each pass reads the job's status (its only way to learn anything from the operator):
- `resumedFrom` names the checkpoint the running attempt resumed from; retention never prunes it;
- condition CheckpointsSynced=False with reason FinalSyncRequested means training ended: one last pass
  with final=True (the newest DeepSpeed/HF checkpoint counts without waiting to settle), then
  status.checkpoints.finalSyncTime is written and the process exits 0.
Status is patched only when something a user would see changed, not every pass.
"""

from __future__ import annotations

import logging
import posixpath
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from multinode.api.checkpointing import MAX_NOT_READY_MESSAGE, MAX_NOT_READY_REPORTED
from multinode.api.conditions import Reason
from multinode.api.constants import CONDITION_CHECKPOINTS_SYNCED, TIME_FORMAT
from multinode.checkpoints import Completion, IncompleteCheckpoint, Mirror, MirroredCheckpoint, SyncReport
from multinode.checkpoints.manifest import rfc3339
from multinode.checkpoints.waiting import DEFAULT_STALLED_SECONDS
from multinode.metrics.mirror import MirrorMetrics
from multinode.mirror.reporter import JobGone, StatusReporter

log = logging.getLogger("multinode.mirror")


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime(TIME_FORMAT)


def final_sync_requested(status: dict[str, Any]) -> bool:
    for condition in status.get("conditions") or []:
        if condition.get("type") == CONDITION_CHECKPOINTS_SYNCED:
            return condition.get("status") == "False" and condition.get("reason") == Reason.FINAL_SYNC_REQUESTED
    return False


def pinned_names(status: dict[str, Any], dest: Path) -> set[str]:
    """The checkpoint the running attempt resumed from, when it is one of ours."""
    resumed = status.get("resumedFrom")
    if resumed and posixpath.dirname(resumed.rstrip("/")) == str(dest).rstrip("/"):
        return {posixpath.basename(resumed.rstrip("/"))}
    return set()


def checkpoint_status(checkpoint: MirroredCheckpoint) -> dict[str, Any]:
    return {"name": checkpoint.name, "path": str(checkpoint.path), "step": checkpoint.step,
            "bytes": checkpoint.total_bytes, "mirroredAt": checkpoint.mirrored_at}


def not_ready_status(incomplete: list[IncompleteCheckpoint]) -> list[dict[str, Any]]:
    """The newest incomplete checkpoints, newest first, as status.checkpoints.notReady lists them."""
    newest = incomplete[::-1][:MAX_NOT_READY_REPORTED]
    entries = [{"name": c.name, "step": c.step, "reason": str(c.reason),
                "message": c.message[:MAX_NOT_READY_MESSAGE], "since": rfc3339(c.since)} for c in newest]
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
                                  (problem.reason, problem.message)):
        update["problem"] = {"reason": problem.reason, "message": problem.message[:4096], "time": now_rfc3339()}
    not_ready = not_ready_status(report.incomplete)
    if report.scanned and not_ready != (reported.get("notReady") or []):
        update["notReady"] = not_ready or None   # merge patch: None removes the list
    return update or None


class MirrorLoop:
    def __init__(self, *, source: Path, dest: Path, reporter: StatusReporter, completion: Completion, keep: int,
                 interval: float, settle: float, metrics: MirrorMetrics, workers: int = 8,
                 world_size: int | None = None, stalled_seconds: float = DEFAULT_STALLED_SECONDS):
        self.reporter = reporter
        self.dest = dest
        self.interval = interval
        self.metrics = metrics
        self.stopping = threading.Event()
        self._pinned: set[str] = set()
        self.engine = Mirror(source, dest, completion=completion, keep=keep, workers=workers,
                             settle_seconds=settle, pinned=lambda: set(self._pinned), log=log,
                             world_size=world_size, stalled_seconds=stalled_seconds)
        self._reported: dict[str, Any] = {}
        self._mirrored_total = 0

    def run(self) -> int:
        """Loop until the final sync is done (exit 0), the job is gone (0), or SIGTERM (0)."""
        try:
            self._reported = dict(self.reporter.read_status().get("checkpoints") or {})
            self._mirrored_total = int(self._reported.get("mirrored") or 0)
            while not self.stopping.is_set():
                if self.one_pass():
                    return 0
                self.stopping.wait(self.interval)
        except JobGone:
            log.info("the job is gone; nothing left to mirror for")
        return 0

    def one_pass(self) -> bool:
        """One sync pass; True when it was the final one."""
        try:
            status = self.reporter.read_status()
        except JobGone:
            raise
        except Exception as e:  # noqa: BLE001 - the API being away must not stop the copying
            log.warning("cannot read the job status (%s); syncing without it", e)
            status = {}
        self._pinned = pinned_names(status, self.dest)
        final = final_sync_requested(status)
        report = self.engine.sync_once(final=final)
        self.metrics.record(report)
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
