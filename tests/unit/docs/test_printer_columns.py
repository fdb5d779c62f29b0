"""`kubectl get tj` as the docs show it has the CRD's printer columns (api.crd.PRINTER_COLUMNS), in order."""

from __future__ import annotations

import re

import pytest

from multinode.api.crd import PRINTER_COLUMNS
from tests.support.paths import DOCS, rel
from tests.unit.docs.markdown import fenced_blocks, markdown_files, tables

PAGES = markdown_files()
HEADERS = [c["name"].upper() for c in PRINTER_COLUMNS]
# kubectl separates columns by at least three spaces; a header ("LAST CHECKPOINT") has single spaces.
COLUMN_GAP = re.compile(r" {2,}")


def table_headers(text: str) -> list[list[str]]:
    """The header line of every `kubectl get tj` output in a console block."""
    found = []
    for block in fenced_blocks(text, "console"):
        lines = block.splitlines()
        for i, line in enumerate(lines[:-1]):
            if re.match(r"^\$ kubectl get (tj|trainingjobs?)\b", line) and lines[i + 1].startswith("NAME "):
                found.append(COLUMN_GAP.split(lines[i + 1].strip()))
    return found


def test_kubectl_get_tj_outputs_are_found() -> None:
    assert sum(len(table_headers(p.read_text())) for p in PAGES) >= 2  # README, quickstart


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_kubectl_get_tj_output_has_the_printer_columns(page) -> None:
    for header in table_headers(page.read_text()):
        assert header == ["NAME", *HEADERS], f"{rel(page)}"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_comment_that_lists_the_columns_lists_them_all(page) -> None:
    """`kubectl get tj llama   # PHASE READY ...` in a sh block."""
    for block in fenced_blocks(page.read_text(), "sh"):
        for line in block.splitlines():
            match = re.match(r"^kubectl get tj [\w-]+\s+# (PHASE .*)$", line)
            if match:
                assert match.group(1) == " ".join(HEADERS), f"{rel(page)}: {line}"


def test_the_quickstart_explains_every_column_and_where_it_comes_from() -> None:
    (columns,) = [t for t in tables((DOCS / "quickstart.md").read_text()) if t.header[:2] == ["column", "from"]]
    documented = {row[0]: row[1].strip("`") for row in columns.rows}
    for column in PRINTER_COLUMNS[:-1]:  # Age is kubectl's own
        assert documented.get(column["name"].upper()) == column["jsonPath"].lstrip("."), column["name"]


def test_api_md_names_every_column() -> None:
    line = next(line for line in (DOCS / "api.md").read_text().splitlines() if line.startswith("`kubectl get tj`"))
    paragraph = line + (DOCS / "api.md").read_text().split(line, 1)[1].split("\n\n", 1)[0]
    assert [c["name"] for c in PRINTER_COLUMNS if c["name"] not in paragraph] == []
