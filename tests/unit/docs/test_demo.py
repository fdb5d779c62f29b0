"""What the docs say `make demo` runs is what tools/demo.py runs: examples/real on real nodes by default
(tools/demo_real.py), the kwok example only in its kwok lane."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.paths import REPO, rel
from tests.unit.docs.markdown import markdown_files, sentences

TOOLS = REPO / "tools"


def path_parts(node: ast.expr) -> list[str]:
    """The string parts of `REPO / "a" / "b"`, in order."""
    if isinstance(node, ast.BinOp):
        return [*path_parts(node.left), *path_parts(node.right)]
    return [node.value] if isinstance(node, ast.Constant) else []


def example_of(script: Path) -> str:
    """The example a demo script applies: its `EXAMPLE = REPO / "examples" / ...` as a repository path."""
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EXAMPLE" for t in node.targets):
            return "/".join(path_parts(node.value))
    raise AssertionError(f"{rel(script)} has no EXAMPLE")


DEFAULT_EXAMPLE = example_of(TOOLS / "demo_real.py")
KWOK_EXAMPLE = example_of(TOOLS / "demo.py")


def test_the_two_lanes_run_different_examples() -> None:
    assert DEFAULT_EXAMPLE != KWOK_EXAMPLE
    assert (REPO / DEFAULT_EXAMPLE).exists() and (REPO / KWOK_EXAMPLE).exists()


def statements() -> list[tuple[str, str]]:
    """Every sentence of the docs, comment block of the examples and help line of the Makefile that
    mentions `make demo`."""
    found = [(rel(page), s) for page in markdown_files() for s in sentences(page.read_text())]
    for example in sorted((REPO / "examples").glob("*.yaml")):
        header = " ".join(line.lstrip("# ") for line in example.read_text().splitlines() if line.startswith("#"))
        found.append((rel(example), header))
    found += [("Makefile", line) for line in (REPO / "Makefile").read_text().splitlines() if "@echo" in line]
    return [(where, s) for where, s in found if "make demo" in s]


def names(statement: str, example: str) -> bool:
    """Whether a statement names an example, by path or (a file) by its name."""
    return example in statement or Path(example).name in re.findall(r"[\w.-]+\.yaml", statement)


@pytest.mark.parametrize(("where", "statement"), statements())
def test_what_make_demo_runs_is_the_real_example_unless_the_kwok_lane_is_named(where: str, statement: str) -> None:
    if names(statement, KWOK_EXAMPLE):
        assert "kwok" in statement, f"{where}: `make demo` runs {DEFAULT_EXAMPLE}; {KWOK_EXAMPLE} only on kwok"


def test_make_help_says_what_make_demo_runs() -> None:
    (line,) = [s for where, s in statements() if where == "Makefile" and "make demo " in s]
    assert DEFAULT_EXAMPLE in line, line


def test_the_kwok_example_says_when_make_demo_runs_it() -> None:
    (header,) = [s for where, s in statements() if where == KWOK_EXAMPLE]
    assert "kwok" in header and DEFAULT_EXAMPLE in header, header
