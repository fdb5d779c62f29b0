"""The reasons an attempt fails with, and the Events the operator posts: the lists the docs give of them are
the ones the package makes (read from its source), so a new reason cannot be left out of a list."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from multinode.api.conditions import FAILURE_REASONS, Reason
from tests.support.paths import DOCS, REPO
from tests.unit.docs.markdown import paragraphs, tables

RECONCILE = REPO / "operator" / "multinode" / "reconcile"


def reason_members(node: ast.AST) -> Iterator[str]:
    """Every `Reason.X` under a node, as its value."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "Reason":
            yield Reason[sub.attr].value


def call_name(call: ast.Call) -> str | None:
    return call.func.id if isinstance(call.func, ast.Name) else None


def calls(name: str) -> Iterator[tuple[Path, ast.FunctionDef | None, ast.Call]]:
    for path in sorted(RECONCILE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            for call in ast.walk(function):
                if isinstance(call, ast.Call) and call_name(call) == name:
                    yield path, function, call


def failure_reasons_made() -> set[str]:
    """The reason of every Failure(...) the planner makes: a `Reason.X` argument, or the `Reason.X` values a
    local variable passed as the reason is assigned in that function (pod_failure's `reason`)."""
    made: set[str] = set()
    for _, function, call in calls("Failure"):
        first = call.args[0]
        if isinstance(first, ast.Name):
            assigned = [n.value for n in ast.walk(function) if isinstance(n, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == first.id for t in n.targets)]
            made |= {r for value in assigned for r in reason_members(value)}
        else:
            made |= set(reason_members(first))
    return made


def test_every_failure_the_planner_makes_has_one_of_the_failure_reasons() -> None:
    made = failure_reasons_made()
    assert len(made) >= 5, made  # the scan finds the Failures
    assert made == set(FAILURE_REASONS), "api.conditions.FAILURE_REASONS is what the docs list: keep it exact"


def backticked(text: str) -> set[str]:
    return set(re.findall(r"`([A-Za-z]+)`", text))


def api_on_reasons() -> str:
    (item,) = [p for p in paragraphs((DOCS / "api.md").read_text()) if p.startswith("- `onReasons`")]
    return item


def api_failure_table() -> str:
    (table,) = [t for t in tables((DOCS / "api.md").read_text()) if t.header == ["reason", "meaning"]
                and any("`PodFailed`" in row[0] for row in t.rows)]
    return " ".join(row[0] for row in table.rows)


def restarts_metric_row() -> str:
    text = (DOCS / "operations.md").read_text()
    return next(line for line in text.splitlines() if line.startswith("| `multinode_restarts_total`"))


def restarting_row() -> str:
    text = (DOCS / "troubleshooting.md").read_text()
    return next(line for line in text.splitlines() if line.startswith("| `Running` |") and "[Restarting] why" in line)


@pytest.mark.parametrize("where", [api_on_reasons, api_failure_table, restarts_metric_row, restarting_row],
                         ids=["api.md onReasons", "api.md failure reasons", "operations.md restarts metric",
                              "troubleshooting.md Restarting row"])
def test_each_list_of_failure_reasons_names_them_all(where) -> None:
    missing = sorted(set(FAILURE_REASONS) - backticked(where()))
    assert missing == [], f"{where.__name__} leaves out {missing}"


def event_reasons_posted() -> set[str]:
    """The reason of every Event(type, Reason.X, ...) the planner posts with a fixed reason (phase changes and
    a failed job's Event carry the phase's or failure's reason, which other lists cover)."""
    return {r for _, _, call in calls("Event") if len(call.args) > 1 for r in reason_members(call.args[1])}


def test_operations_md_lists_every_event_the_operator_posts() -> None:
    posted = event_reasons_posted()
    assert len(posted) >= 6, posted
    row = next(line for line in (DOCS / "operations.md").read_text().splitlines()
               if line.startswith("| create an Event on the TrainingJob |"))
    assert sorted(posted - backticked(row)) == []


def test_troubleshooting_md_lists_every_event_the_operator_posts() -> None:
    text = (DOCS / "troubleshooting.md").read_text()
    (events,) = [p for p in paragraphs(text) if p.startswith("Events:")]
    assert sorted(event_reasons_posted() - backticked(events)) == []
