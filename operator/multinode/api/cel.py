"""Builders for the CEL rules (x-kubernetes-validations) the CRD carries.

The models attach these through json_schema_extra, so the pydantic models stay
the single source of the CRD. Every message starts with the field it is about,
because kubectl shows the message without the rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

VALIDATIONS_KEY = "x-kubernetes-validations"

# CEL keywords the apiserver would make us escape; spec field names must avoid them.
_CEL_RESERVED = frozenset(
    "true false null in as break const continue else for function if import let loop "
    "package namespace return var void while".split()
)
_CEL_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def cel_rule(
    rule: str,
    message: str,
    *,
    field_path: str | None = None,
    message_expression: str | None = None,
) -> dict[str, Any]:
    """One x-kubernetes-validations entry; keys in the order kubectl prints them."""
    entry: dict[str, Any] = {"rule": rule, "message": message}
    if message_expression is not None:
        entry["messageExpression"] = message_expression
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


def add_rules(schema: dict[str, Any], rules: Iterable[dict[str, Any]]) -> None:
    """Append rules to a JSON schema node (used from json_schema_extra callables)."""
    schema.setdefault(VALIDATIONS_KEY, []).extend(rules)


def cel_string_list(values: Iterable[str]) -> str:
    """A CEL list literal of strings, sorted so the generated CRD is stable."""
    for value in values:
        if "'" in value or "\\" in value:
            raise ValueError(f"cannot quote {value!r} as a CEL string literal")
    return "[" + ", ".join(f"'{value}'" for value in sorted(values)) + "]"


def immutable_field_rule(field: str, parent_path: str) -> dict[str, Any]:
    """Transition rule, placed on the parent object, that freezes one field.

    A rule on the field itself would not run when the field is added or removed
    (transition rules need both old and new values), so the rule sits on the parent
    and compares presence as well as value.
    """
    if not _CEL_IDENTIFIER.match(field) or field in _CEL_RESERVED:
        raise ValueError(f"{field!r} needs CEL escaping; pick another field name")
    return cel_rule(
        f"has(self.{field}) ? (has(oldSelf.{field}) && self.{field} == oldSelf.{field})"
        f" : !has(oldSelf.{field})",
        f"{parent_path}.{field} is immutable: create a new TrainingJob to change it",
        field_path=f".{field}",
    )


def immutable_fields_rules(fields: Iterable[str], parent_path: str) -> list[dict[str, Any]]:
    return [immutable_field_rule(field, parent_path) for field in fields]
