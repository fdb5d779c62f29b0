"""Where the repository's files are, for every tier of tests (tools/ keeps its own: localcluster's REPO_ROOT)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CHART_DIR = REPO / "charts" / "multinode-operator"


def rel(path: Path) -> str:
    """`path` as the repository names it (docs/x.md), for test ids and messages."""
    return str(path.relative_to(REPO))
