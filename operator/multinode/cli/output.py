"""Terminal output as kubectl prints it: aligned tables with uppercase headers, colour only on a terminal,
JSON or YAML on request, and the connection flags kubectl users already type."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

from multinode.api.status import Phase

# ANSI colours by meaning; NO_COLOR (https://no-color.org) and a non-terminal switch them off.
_COLOURS = {"good": "32", "bad": "31", "warn": "33", "dim": "2"}
_PHASE_MOOD: dict[str, str] = {Phase.SUCCEEDED: "good", Phase.RUNNING: "good", Phase.FAILED: "bad",
                               Phase.RESTARTING: "warn", Phase.PENDING: "warn", Phase.STARTING: "warn",
                               Phase.SUSPENDED: "dim"}


def use_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, mood: str | None, colour: bool) -> str:
    if not colour or mood not in _COLOURS:
        return text
    return f"\033[{_COLOURS[mood]}m{text}\033[0m"


def phase_mood(phase: str | None) -> str | None:
    return _PHASE_MOOD.get(phase or "")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "",
          moods: Sequence[str | None] | None = None, colour: bool = False) -> str:
    """kubectl's layout: uppercase headers, columns three spaces apart, None shown as <none>. `moods`
    colours whole rows (padding is computed on the plain text, so colour never shifts a column)."""
    cells = [[str(h).upper() for h in headers]] + [["<none>" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        text = "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        mood = moods[n - 1] if moods and n > 0 else None
        lines.append(indent + paint(text, mood, colour))
    return "\n".join(lines)


def dump(obj: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(obj, indent=2, sort_keys=False)
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False).rstrip("\n")


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """-n/--namespace, --kubeconfig and --context, as kubectl spells them."""
    parser.add_argument("-n", "--namespace", help="the job's namespace (default: the context's, as kubectl)")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None,
                        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else in-cluster)")
    parser.add_argument("--context", help="kubeconfig context to use")


def first_kubeconfig(value: str | None) -> str | None:
    """$KUBECONFIG may list several files (kubectl merges them); the client library reads one."""
    if not value:
        return None
    return next((part for part in value.split(os.pathsep) if part), None)
