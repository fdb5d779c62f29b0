"""`multinode status` text: a job's status object as a person reads it.

Pure: (the job as stored, now) -> text. It reads the raw object, not the model, so status fields this
version does not know (status.progress, status.goodput, whatever comes next) are still shown, as
key/value lines, without a change here.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from multinode.cli.output import paint, phase_mood, table

# Nodes shown when a job has more: the interesting ones (not Running/Succeeded, or failing) first.
DEFAULT_MAX_NODES = 20
_MESSAGE_WIDTH = 200
# Status fields with a section of their own (or shown in the header); any other is shown generically.
_KNOWN = {"observedGeneration", "phase", "conditions", "readyNodes", "numNodes", "ready", "startTime",
          "completionTime", "nodeStatuses", "attempt", "restarts", "resumedFrom", "checkpoints",
          "uncountedRestarts", "restartHistory", "nextAttemptTime", "attemptStartTime", "imageDigest",
          "topologyDomain", "nodeCounts", "nodeStatusesOmitted", "restartStrategy"}
_FINE_PHASES = ("Running", "Succeeded")


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(value: Any, now: datetime) -> str | None:
    """kubectl's short ages: 42s, 5m, 3h, 2d; None when `value` is no time."""
    when = parse_time(value)
    if when is None:
        return None
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _short(text: Any, width: int = _MESSAGE_WIDTH) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def node_is_fine(node: dict[str, Any]) -> bool:
    return (node.get("phase") in _FINE_PHASES and node.get("exitCode") in (None, 0)
            and not node.get("reason"))


def interesting_nodes(nodes: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(shown, hidden): every node when they fit in `limit`; else the ones not fine first, in index order,
    up to `limit`. A job of 1000 running nodes shows none of them, one of 1000 with 3 failing shows 3."""
    ordered = sorted(nodes, key=lambda n: n.get("index", 0))
    if len(ordered) <= limit:
        return ordered, []
    not_fine = [n for n in ordered if not node_is_fine(n)]
    shown = not_fine[:limit]
    names = {id(n) for n in shown}
    return shown, [n for n in ordered if id(n) not in names]


def _hidden_line(hidden: list[dict[str, Any]]) -> str:
    fine = sum(1 for n in hidden if node_is_fine(n))
    phases = ", ".join(f"{phase} {count}" for phase, count in sorted(Counter(n.get("phase") or "Unknown"
                                                                                for n in hidden).items()))
    if fine == len(hidden):
        return f"… {len(hidden)} more fine ({phases})"
    return f"… {len(hidden)} more ({len(hidden) - fine} not fine; {phases}): -o yaml shows all"


_COUNT_LABELS = (("running", "Running"), ("succeeded", "Succeeded"), ("pending", "Pending"), ("failed", "Failed"),
                 ("unknown", "Unknown"), ("noPod", "no pod"))


def counts_line(counts: dict[str, Any]) -> str:
    """status.nodeCounts as one line: `Running 9990, Pending 6, Failed 4 (10 not fine)`."""
    parts = [f"{label} {counts[key]}" for key, label in _COUNT_LABELS if counts.get(key)]
    return ", ".join(parts or ["none"]) + f" ({counts.get('notFine') or 0} not fine)"


def _bytes(n: Any) -> str:
    size = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


def _generic(value: Any, now: datetime, indent: str) -> list[str]:
    """key: value lines of any status section, nested by indentation; times get their age."""
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{indent}{key}:")
                lines.extend(_generic(item, now, indent + "  "))
            else:
                ago = age(item, now)
                lines.append(f"{indent}{key}: {item}" + (f" ({ago} ago)" if ago else ""))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                sub = _generic(item, now, indent + "  ")
                lines.append(indent + "- " + sub[0].lstrip() if sub else indent + "- {}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{indent}- {item}")
    else:
        lines.append(f"{indent}{value}")
    return lines


def _field(label: str, value: Any) -> str:
    return f"{label + ':':<15}{value}"


def describe(job: dict[str, Any], now: datetime, *, max_nodes: int = DEFAULT_MAX_NODES, colour: bool = False) -> str:
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    phase = status.get("phase")
    out = [_field("Name", meta.get("name")), _field("Namespace", meta.get("namespace")),
           _field("Phase", paint(phase or "<none>", phase_mood(phase), colour)),
           _field("Ready", status.get("ready") or f"-/{spec.get('numNodes', status.get('numNodes'))}"),
           _field("Attempt", f"{status.get('attempt', 0)} (restarts: {status.get('restarts', 0)} counted, "
                             f"{status.get('uncountedRestarts', 0)} uncounted)")]
    for label, key in (("Started", "startTime"), ("Attempt start", "attemptStartTime"),
                       ("Next attempt", "nextAttemptTime"), ("Completed", "completionTime")):
        if status.get(key):
            when, at = f"{status[key]}", parse_time(status[key])
            if at is not None and at <= now:  # a future time (the next attempt's) has no age
                when += f" ({age(status[key], now)} ago)"
            out.append(_field(label, when))
    for label, key in (("Restart", "restartStrategy"), ("Image", "imageDigest"), ("Resumed from", "resumedFrom"),
                       ("Topology", "topologyDomain")):
        if status.get(key):
            out.append(_field(label, status[key]))

    conditions = status.get("conditions") or []
    if conditions:
        out += ["", "Conditions:"]
        moods = ["bad" if c.get("type") == "Failed" and c.get("status") == "True"
                 else None if c.get("status") == "True" else "dim" for c in conditions]
        out.append(table(["type", "status", "reason", "age", "message"],
                         [[c.get("type"), c.get("status"), c.get("reason"), age(c.get("lastTransitionTime"), now),
                           _short(c.get("message")) or ""] for c in conditions], indent="  ", moods=moods,
                         colour=colour))

    nodes = status.get("nodeStatuses") or []
    counts, omitted = status.get("nodeCounts"), status.get("nodeStatusesOmitted") or 0
    if nodes or counts:
        shown, hidden = interesting_nodes(nodes, max_nodes)
        out += ["", f"Nodes (attempt {status.get('attempt', 0)}):"]
        if isinstance(counts, dict):
            out.append("  " + counts_line(counts))
        if shown:
            out.append(table(["index", "pod", "node", "phase", "reason", "exit"],
                             [[n.get("index"), n.get("pod"), n.get("node"), n.get("phase"), n.get("reason") or "",
                               "" if n.get("exitCode") is None else n["exitCode"]] for n in shown],
                             indent="  ", colour=colour,
                             moods=[None if node_is_fine(n) else "bad" if n.get("phase") == "Failed"
                                    or n.get("exitCode") not in (None, 0) else "warn" for n in shown]))
        if hidden:
            out.append("  " + _hidden_line(hidden))
        if omitted:  # a job bigger than the status lists: it keeps the nodes not fine first
            out.append(f"  … {omitted} more not in the status (it lists {len(nodes)} nodes, those not fine first)")

    history = status.get("restartHistory") or []
    if history:
        out += ["", "Restart history:"]
        out.append(table(["attempt", "reason", "counted", "age", "message"],
                         [[r.get("attempt"), r.get("reason"), "yes" if r.get("counted") else "no",
                           age(r.get("time"), now), _short(r.get("message"))] for r in history], indent="  "))

    checkpoints = status.get("checkpoints")
    if checkpoints:
        out += ["", "Checkpoints:", *_checkpoint_lines(checkpoints, status, now, colour)]

    for key in ("progress", "goodput", *sorted(k for k in status if k not in _KNOWN | {"progress", "goodput"})):
        if status.get(key) not in (None, {}, []):
            out += ["", f"{key[:1].upper()}{key[1:]}:", *_generic(status[key], now, "  ")]
    return "\n".join(out)


def _checkpoint_lines(checkpoints: dict[str, Any], status: dict[str, Any], now: datetime, colour: bool) -> list[str]:
    lines = []
    latest = checkpoints.get("latest")
    if latest:
        step = f"step {latest['step']}, " if latest.get("step") is not None else ""
        lines.append(f"  Latest:     {latest.get('name')} ({step}{_bytes(latest.get('bytes'))}), mirrored "
                     f"{age(latest.get('mirroredAt'), now) or '?'} ago, at {latest.get('path')}")
    else:
        lines.append("  Latest:     none mirrored yet")
    lines.append(f"  Mirrored:   {checkpoints.get('mirrored', 0)}")
    if checkpoints.get("lastSyncTime"):
        lines.append(f"  Last sync:  {age(checkpoints['lastSyncTime'], now)} ago")
    # Lag: how far the newest mirrored checkpoint is behind training, in steps when training reports its
    # step (status.progress.step), and behind the newest checkpoint still being written.
    progress_step = (status.get("progress") or {}).get("step") if isinstance(status.get("progress"), dict) else None
    if latest and latest.get("step") is not None and isinstance(progress_step, int):
        lines.append(f"  Lag:        {progress_step - latest['step']} steps behind training (step {progress_step})")
    not_ready = checkpoints.get("notReady") or []
    if not_ready:
        lines.append(f"  Not ready:  {len(not_ready)} (newest: {not_ready[0].get('name')}, "
                     f"{not_ready[0].get('reason')}, for {age(not_ready[0].get('since'), now)})")
    if checkpoints.get("finalSyncTime"):
        lines.append(f"  Final sync: {checkpoints['finalSyncTime']}")
    problem = checkpoints.get("problem")
    if problem:
        lines.append("  " + paint(f"Problem:    {problem.get('reason')}: {_short(problem.get('message'))}", "bad",
                                  colour))
    return lines
