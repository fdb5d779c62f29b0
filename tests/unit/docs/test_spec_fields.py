"""What the docs say about spec fields is what the models say: which fields may change after creation, that
the others never change, and that every field the docs name exists (no `nprocPerNode` for numProcPerNode)."""

from __future__ import annotations

import difflib
import re
from typing import Any

import pytest
import yaml

from multinode.api import TrainingJobSpec
from multinode.api.crd import openapi_schema
from tests.support.paths import CHART_DIR, DOCS, rel
from tests.unit.docs.markdown import code_spans, markdown_files, sentences, tables

PAGES = markdown_files()
TOP_LEVEL = {field.alias or name: name for name, field in TrainingJobSpec.model_fields.items()}
MUTABLE = {alias for alias, name in TOP_LEVEL.items() if name in TrainingJobSpec.MUTABLE_FIELDS}
IMMUTABLE = set(TOP_LEVEL) - MUTABLE
# Words of a sentence that says which fields may change after creation.
MUTABILITY_WORDS = re.compile(r"immutable|may (?:be )?chang|may be edited|you may change", re.IGNORECASE)


def named_fields(sentence: str) -> set[str]:
    """The top-level spec fields a sentence names in code spans (`suspend`; not `scheduling.volcano`)."""
    return {span for span in re.findall(r"`([^`]+)`", sentence) if span in TOP_LEVEL}


def mutability_sentences() -> list[tuple[str, str]]:
    return [(rel(page), s) for page in PAGES for s in sentences(page.read_text())
            if MUTABILITY_WORDS.search(s) and len(named_fields(s) & MUTABLE) >= 2]


def test_every_list_of_the_fields_that_may_change_is_mutable_fields() -> None:
    found = mutability_sentences()
    assert len(found) >= 4, found  # api.md (twice), user-guide.md, gitops.md
    wrong = [(page, sorted(named_fields(s) ^ MUTABLE), s) for page, s in found if named_fields(s) != MUTABLE]
    assert wrong == [], f"TrainingJobSpec.MUTABLE_FIELDS is {sorted(MUTABLE)}; these say otherwise (difference shown)"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_no_page_says_an_immutable_field_changes(page) -> None:
    changing = re.compile(r"`(\w+)` (?:changes|is changed|is edited|may change)\b")
    said = [m.group(0) for m in changing.finditer(page.read_text()) if m.group(1) in IMMUTABLE]
    assert said == [], f"{rel(page)}: these fields are immutable (admission refuses any change)"


def schema() -> dict[str, Any]:
    return openapi_schema()


def resolves(path: str, root: dict[str, Any]) -> bool:
    """Whether `spec.a[].b` / `status.x[0].y` names a field of the schema (any key of a map)."""
    node = root
    for part in path.split("."):
        name = re.sub(r"\[[^\]]*\]$", "", part)
        if node.get("type") == "array":
            node = node.get("items", {})
        if "additionalProperties" in node or node.get("x-kubernetes-preserve-unknown-fields"):
            return True
        properties = node.get("properties") or {}
        if name not in properties:
            return False
        node = properties[name]
    return True


FIELD_PATH = re.compile(r"^(spec|status)\.(\w+)[\w.\[\]*]*$")


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_path_under_a_field_of_ours_exists(page) -> None:
    """`spec.healthCheck.x` must be a field; `spec.trainer.numNodes` (Kubeflow's) or a pod's `spec.nodeName`
    are other objects' and not checked (a misspelt top-level field is the next test's)."""
    root = schema()
    paths = set()
    for span in code_spans(page.read_text()):
        match = FIELD_PATH.match(span)
        if match and match.group(2) in root["properties"][match.group(1)]["properties"]:
            paths.add(span.rstrip("."))
    missing = sorted(p for p in paths if not resolves(p, root))
    assert missing == [], f"{rel(page)} names fields the CRD does not have"


def field_names(node: dict[str, Any]) -> set[str]:
    names = set()
    for name, child in (node.get("properties") or {}).items():
        names |= {name, *field_names(child)}
    if "items" in node:
        names |= field_names(node["items"])
    return names


CAMEL = re.compile(r"^[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+$")


def known_names() -> set[str]:
    """The camelCase names of the project: the CRD's fields, the chart's values and Chart.yaml's keys."""
    def keys(value: Any) -> set[str]:
        if not isinstance(value, dict):
            return set()
        return set(value) | {k for v in value.values() for k in keys(v)}
    chart = {name: yaml.safe_load((CHART_DIR / name).read_text()) for name in ("values.yaml", "Chart.yaml")}
    return field_names(schema()) | keys(chart["values.yaml"]) | keys(chart["Chart.yaml"])


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_no_camel_case_name_is_a_misspelt_field(page) -> None:
    """A camelCase name in a code span that is none of ours but nearly spells one is a typo of it."""
    names = known_names()
    lowered = {n.lower(): n for n in names}
    near: dict[str, str] = {}
    for span in set(code_spans(page.read_text())):
        if not CAMEL.match(span) or span in names:
            continue
        close = difflib.get_close_matches(span.lower(), list(lowered), n=1, cutoff=0.9)
        if close:
            near[span] = lowered[close[0]]
    assert near == {}, f"{rel(page)}: these name nothing of ours but nearly spell one of its names"


@pytest.mark.parametrize("top", ["spec", "status"])
def test_api_md_tables_name_every_top_level_field(top: str) -> None:
    """api.md's tables (spec, lifecycle fields, status) cover every field; reference.md has the details."""
    first_cells = [row[0] for table in tables((DOCS / "api.md").read_text()) for row in table.rows]
    named = {span.split(".")[0] for cell in first_cells for span in re.findall(r"`([\w.]+)`", cell)}
    assert sorted(set(schema()["properties"][top]["properties"]) - named) == []
