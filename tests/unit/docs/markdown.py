"""Reading the docs as a reader's tools do: prose sentences, code spans, fenced blocks and tables (split as
GitHub-flavoured markdown splits them), for the tests that hold the docs to the code."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import CHART_DIR, DOCS, REPO

# A fenced block, also one indented under a list item.
FENCE = re.compile(r"^[ \t]*```(\w*)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# A table's delimiter row: |---|:--:|---|
DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
# A `|` that ends a cell: any that is not backslash-escaped, inside a code span too (GFM).
CELL_BORDER = re.compile(r"(?<!\\)\|")


def markdown_files() -> list[Path]:
    """Every page a user reads: the README, docs/ and the chart's README."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md")), CHART_DIR / "README.md"]


def fenced_blocks(text: str, lang: str | None = None) -> list[str]:
    return [textwrap.dedent(m.group(2)) for m in FENCE.finditer(text) if lang is None or m.group(1) == lang]


def without_fences(text: str) -> str:
    """The text with every fenced block blanked out (its lines kept, so line numbers stay)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def code_spans(text: str) -> list[str]:
    return CODE_SPAN.findall(without_fences(text))


def split_row(line: str) -> list[str]:
    """The cells of a table row, as GitHub-flavoured markdown splits it."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip() for cell in CELL_BORDER.split(inner)]


@dataclass(frozen=True)
class Table:
    line: int  # 1-based line of the header row
    header: list[str]
    rows: list[list[str]]
    raw_rows: list[str]


def tables(text: str) -> list[Table]:
    lines = without_fences(text).splitlines()
    found = []
    i = 0
    while i + 1 < len(lines):
        if "|" in lines[i] and DELIMITER_ROW.match(lines[i + 1]) and "-" in lines[i + 1]:
            raw = []
            j = i + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                raw.append(lines[j])
                j += 1
            found.append(Table(i + 1, split_row(lines[i]), [split_row(r) for r in raw], raw))
            i = j
        else:
            i += 1
    return found


def paragraphs(text: str) -> list[str]:
    """Prose: blocks between blank lines outside fences, tables and headings; each list item on its own."""
    out: list[str] = []
    current: list[str] = []
    for line in [*without_fences(text).splitlines(), ""]:
        stripped = line.strip()
        starts_item = bool(re.match(r"^(\s*)([-*]|\d+\.)\s", line))
        if not stripped or stripped.startswith(("|", "#")) or starts_item:
            if current:
                out.append(" ".join(current))
            current = [stripped] if starts_item else []
        else:
            current.append(stripped)
    return out


def sentences(text: str) -> list[str]:
    return [s for p in paragraphs(text) for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*`\[])", p)]
