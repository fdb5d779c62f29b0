"""docs/reference.md is generated from the models; a stale copy fails here (regenerate: make docs)."""

from __future__ import annotations


from multinode.api import TrainingJobSpec
from multinode.api.reference import render_reference
from tests.support.paths import DOCS

REFERENCE = DOCS / "reference.md"


def test_committed_reference_matches_the_models() -> None:
    assert REFERENCE.read_text() == render_reference(), "docs/reference.md is stale: run `make docs`"


def test_every_spec_field_is_in_the_reference_with_its_description() -> None:
    text = render_reference()
    for name, field in TrainingJobSpec.model_fields.items():
        assert f"| `spec.{field.alias}` |" in text, name
        assert " ".join(field.description.split()).replace("|", "\\|") in text, name
    assert "| `spec.failurePolicy.rules[].onExitCodes[].min` | integer | yes |" in text
