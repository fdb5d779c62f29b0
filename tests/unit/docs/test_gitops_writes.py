"""The spec fields the operator writes (read from the controller's source) are the ones docs/gitops.md tells
Argo CD and Flux to leave to it, and the ones docs/operations.md lists among its writes."""

from __future__ import annotations

import ast

import yaml

from tests.support.paths import DOCS, REPO
from tests.unit.docs.markdown import fenced_blocks, tables

CONTROLLER = REPO / "operator" / "multinode" / "controller"


def spec_fields_written() -> set[str]:
    """JSON pointers of every `{"spec": {...}}` body the controller sends (a patch of a job's spec)."""
    pointers: set[str] = set()
    for path in sorted(CONTROLLER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "spec" and isinstance(value, ast.Dict):
                    pointers |= {f"/spec/{k.value}" for k in value.keys if isinstance(k, ast.Constant)}
    return pointers


def test_the_controller_writes_some_spec_field() -> None:
    """The scan finds the operator's one spec write (Kueue's suspend), so the comparisons below mean something."""
    assert spec_fields_written() == {"/spec/suspend"}


def gitops_excerpts() -> list[dict]:
    return [doc for block in fenced_blocks((DOCS / "gitops.md").read_text(), "yaml")
            for doc in yaml.safe_load_all(block) if isinstance(doc, dict)]


def test_argo_cd_is_told_to_ignore_every_spec_field_the_operator_writes() -> None:
    applications = [d for d in gitops_excerpts() if "ignoreDifferences" in (d.get("spec") or {})]
    assert applications
    for application in applications:  # the excerpt in the Kueue section, and the whole Application
        rules = [r for r in application["spec"]["ignoreDifferences"] if r.get("kind") == "TrainingJob"]
        assert {p for r in rules for p in r["jsonPointers"]} == spec_fields_written()
        # Without it Argo CD ignores the field in its diff but still syncs Git's value over the operator's.
        assert "RespectIgnoreDifferences=true" in application["spec"]["syncPolicy"]["syncOptions"]


def test_flux_is_told_to_ignore_every_spec_field_the_operator_writes() -> None:
    (kustomization,) = [d for d in gitops_excerpts() if "ignore" in (d.get("spec") or {})]
    rules = [r for r in kustomization["spec"]["ignore"] if r.get("target", {}).get("kind") == "TrainingJob"]
    assert {p for r in rules for p in r["paths"]} == spec_fields_written()


def test_operations_md_lists_the_spec_write() -> None:
    (writes,) = [t for t in tables((DOCS / "operations.md").read_text()) if t.header == ["write", "when"]]
    written = {row[0] for row in writes.rows}
    for pointer in spec_fields_written():
        field = pointer.removeprefix("/").replace("/", ".")
        assert any(f"`{field}`" in w for w in written), f"docs/operations.md's writes table lacks {field}"
