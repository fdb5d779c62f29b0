"""The condition types and reasons of multinode.api.conditions are the only ones the docs, the Argo CD
health check and the package spell, and every one of them is documented."""

from __future__ import annotations

import re

from multinode.api.conditions import ConditionType, Reason
from tests.support.paths import DOCS, REPO

PACKAGE = REPO / "operator" / "multinode"
TROUBLESHOOTING = (DOCS / "troubleshooting.md").read_text()
API = (DOCS / "api.md").read_text()
LUA = (DOCS / "gitops" / "argocd" / "resource_customizations" / "multinode.dev" / "TrainingJob"
       / "health.lua").read_text()

REASONS = {r.value for r in Reason}
TYPES = {t.value for t in ConditionType}

# The same words in the package with another meaning, each read or written once: Kubernetes' own
# reasons (the scheduler's PodScheduled=False/Unschedulable) and the job's phases (api.status.Phase).
OTHER_MEANINGS = {
    ("Unschedulable", "reconcile/observe.py"),
    ("Restarting", "api/status.py"),
    ("Suspended", "api/status.py"),
    ("Restarting", "metrics/operator.py"),
    ("Suspended", "metrics/operator.py"),
    # Ready: the printer column of status.ready, and the pods' and nodes' own Ready condition.
    ("Ready", "api/crd.py"),
    ("Ready", "cli/describe.py"),
    ("Ready", "reconcile/observe.py"),
    ("Ready", "reconcile/placement.py"),
    # The same meaning, in the one module a trainer may copy, which imports nothing of multinode: a test of
    # its own (tests/unit/progress) holds it to the Reason.
    ("NodeCordoned", "progress.py"),
}


def reasons_table() -> list[tuple[str, list[str]]]:
    """(condition type, reasons) of each row of troubleshooting.md's "Every condition reason" table."""
    section = TROUBLESHOOTING.split("## Every condition reason", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            rows.append((cells[0].strip("`"), re.findall(r"`([^`]+)`", cells[1])))
    return rows


def test_every_reason_and_type_in_the_troubleshooting_table_is_defined() -> None:
    rows = reasons_table()
    assert rows, "the table was not found"
    assert {type_ for type_, _ in rows} == TYPES
    named = {reason for _, reasons in rows for reason in reasons}
    assert named - REASONS == set()


def test_every_reason_is_documented() -> None:
    documented = {reason for _, reasons in reasons_table() for reason in reasons}
    events = TROUBLESHOOTING.split("Events:", 1)[1].split("\n\n", 1)[0]
    documented |= set(re.findall(r"`([A-Za-z]+)`", events))
    assert REASONS - documented == set(), "add them to docs/troubleshooting.md#every-condition-reason"


def test_the_api_reference_lists_every_condition_type() -> None:
    line = next(line for line in API.splitlines() if line.startswith("| `conditions` |"))
    listed = set(re.findall(r"`([A-Za-z]+)`", line.split("Types:", 1)[1].split("(", 1)[0]))
    assert listed == TYPES


def test_the_argocd_health_check_names_only_defined_types_and_reasons() -> None:
    types = set(re.findall(r'condition\("([A-Za-z]+)"\)', LUA))
    reasons = set(re.findall(r'\.reason == "([A-Za-z]+)"', LUA))
    assert types and reasons
    assert types - TYPES == set()
    assert reasons - REASONS == set()


def test_each_reason_is_spelled_once_in_the_package() -> None:
    spelled: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = path.relative_to(PACKAGE).as_posix()
        if module == "api/conditions.py":
            continue
        text = path.read_text()
        for value in REASONS | TYPES:
            if f'"{value}"' in text and (value, module) not in OTHER_MEANINGS:
                spelled.setdefault(value, []).append(module)
    # Condition types double as phases in api.status.Phase and in places that read pods' phases.
    phases = {"Running", "Succeeded", "Failed", "Suspended"}
    assert {value: modules for value, modules in spelled.items() if value not in phases} == {}
