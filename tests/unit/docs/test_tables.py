"""Every markdown table parses as GitHub renders it, and the generated field reference shows each bound of
the CRD schema as the schema means it (an exclusive bound is not a ≥)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from multinode.api.crd import openapi_schema
from multinode.api.reference import render_reference
from tests.support.paths import DOCS, rel
from tests.unit.docs.markdown import Table, markdown_files, tables

PAGES = markdown_files()


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_row_has_the_columns_of_its_header(page) -> None:
    broken = [f"{rel(page)}:{table.line}: {len(row)} cells under {len(table.header)} columns: {raw[:100]}"
              for table in tables(page.read_text()) for row, raw in zip(table.rows, table.raw_rows, strict=True)
              if len(row) != len(table.header)]
    assert broken == [], "an unescaped | splits a cell (escape it as \\|, in code spans too)"


def test_the_generated_reference_parses_too() -> None:
    """reference.md as `make docs` writes it now, not only as committed (test_api_reference compares the two)."""
    found = tables(render_reference())
    assert len(found) == 2  # spec, status
    assert all(len(row) == len(table.header) for table in found for row in table.rows)


def schema_nodes(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(reference path, schema node) of every field, as the reference names them."""
    yield path, node
    children = node.get("properties") or (node.get("items") or {}).get("properties") or {}
    prefix = f"{path}[]" if node.get("type") == "array" else path
    for name, child in children.items():
        yield from schema_nodes(child, f"{prefix}.{name}")


def reference_limits() -> dict[str, str]:
    rows: dict[str, str] = {}
    for table in tables((DOCS / "reference.md").read_text()):
        column = table.header.index("limits")
        rows |= {row[0].strip("`"): row[column] for row in table.rows}
    return rows


@pytest.mark.parametrize(("keyword", "exclusive", "inclusive_sign", "exclusive_sign"),
                         [("minimum", "exclusiveMinimum", "≥", ">"), ("maximum", "exclusiveMaximum", "≤", "<")])
def test_the_reference_prints_each_bound_as_inclusive_or_exclusive_as_the_schema(
        keyword: str, exclusive: str, inclusive_sign: str, exclusive_sign: str) -> None:
    schema = openapi_schema()
    limits = reference_limits()
    checked = 0
    for top in ("spec", "status"):
        for path, node in schema_nodes(schema["properties"][top], top):
            if keyword not in node or path == top:
                continue
            sign = exclusive_sign if node.get(exclusive) else inclusive_sign
            assert f"{sign} {node[keyword]}" in limits[path], f"{path}: {limits[path]!r}, schema {node}"
            checked += 1
    assert checked > 10


def test_some_bounds_are_exclusive() -> None:
    """The case above is not vacuous: the schema has exclusive bounds (minGbps, stragglers.factor)."""
    schema = openapi_schema()
    exclusive = [p for top in ("spec", "status") for p, n in schema_nodes(schema["properties"][top], top)
                 if n.get("exclusiveMinimum") or n.get("exclusiveMaximum")]
    assert len(exclusive) >= 2, exclusive


def test_tables_are_found_where_they_are() -> None:
    """The table finder sees the tables a reader sees (a parser that found none would pass every test)."""
    by_page = {rel(p): tables(p.read_text()) for p in PAGES}
    assert len(by_page["docs/reference.md"]) == 2
    assert sum(len(found) for found in by_page.values()) > 50
    assert all(isinstance(t, Table) and t.header and t.rows for found in by_page.values() for t in found)
