"""The unit tier stays pure: no test under tests/unit, nor the conftest every tier loads, nor any module of
tests/ they import (followed through), imports the dev-cluster package or the Kubernetes client, or another
tier's tests. What needs them lives in tests/frameworks (real frameworks) or tests/integration (the cluster)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO, rel

TESTS = REPO / "tests"
FORBIDDEN = ("localcluster", "kubernetes", "tests.integration", "tests.frameworks")
# Each exception, by file, with what it may import and why.
ALLOWED = {
    # The pinned helm and kubectl the chart and completion tests run: where `make binaries` puts them and the
    # Kubernetes version it pins, read from the dev-cluster package's build layout (no cluster).
    "tests/support/binaries.py": {"localcluster.binaries"},
    # The test of mirror.reporter, one of the three modules the import contracts let import the client: the
    # function under test takes the client's Configuration.
    "tests/unit/mirror/test_reporter.py": {"kubernetes.client"},
}


def imported_names(path: Path) -> set[str]:
    """Every module `path` imports, at any depth of its code, as dotted names (`from a import b` gives a.b)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def module_file(name: str) -> Path | None:
    """The file of a module (or of the package, for `from tests.x import name`) under tests/, if any."""
    parts = name.split(".")
    while parts:
        base = REPO.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        parts.pop()
    return None


def offending_imports(roots: list[Path]) -> dict[str, list[str]]:
    """For each file reached from `roots` through imports of tests.*: its imports FORBIDDEN names."""
    found: dict[str, list[str]] = {}
    seen: set[Path] = set()
    todo = list(roots)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        allowed = ALLOWED.get(rel(path), set())
        for name in sorted(imported_names(path)):
            if any(name == f or name.startswith(f"{f}.") for f in FORBIDDEN) and name not in allowed:
                found.setdefault(rel(path), []).append(name)
            elif name.startswith("tests.") and (target := module_file(name)) is not None:
                todo.append(target)
    return found


UNIT_FILES = [TESTS / "conftest.py", *sorted((TESTS / "unit").rglob("*.py"))]


def test_the_unit_tier_imports_neither_the_cluster_nor_the_client_nor_another_tier() -> None:
    assert offending_imports(UNIT_FILES) == {}


def test_the_check_follows_imports_into_the_support_modules() -> None:
    # tests/support/kube.py talks to the cluster: a unit test importing it would be caught through it.
    assert "kubernetes.client" in offending_imports([TESTS / "support" / "kube.py"])["tests/support/kube.py"]


@pytest.mark.parametrize("exception", sorted(ALLOWED))
def test_each_exception_still_imports_what_it_is_allowed(exception: str) -> None:
    assert ALLOWED[exception] <= imported_names(REPO / exception)
