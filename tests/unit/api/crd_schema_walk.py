"""Helpers that walk a CRD openAPIV3Schema the way the apiserver does (pruning, defaulting)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

PRESERVE = "x-kubernetes-preserve-unknown-fields"


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with a readable path (properties by name, list items as [])."""
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from walk(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def walk_properties(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Only nodes that are named properties (what `kubectl explain` documents)."""
    for path, node in walk(schema):
        if path and not path.endswith(("[]", "{}")):
            yield path, node


def prune(value: Any, schema: dict[str, Any]) -> Any:
    """Drop what the apiserver would drop: object fields the schema does not declare."""
    if isinstance(value, dict) and schema.get("type") == "object":
        if "additionalProperties" in schema:
            return {key: prune(item, schema["additionalProperties"]) for key, item in value.items()}
        properties = schema.get("properties", {})
        pruned = {}
        for key, item in value.items():
            if key in properties:
                pruned[key] = prune(item, properties[key])
            elif schema.get(PRESERVE):
                pruned[key] = copy.deepcopy(item)
        return pruned
    if isinstance(value, list) and "items" in schema:
        return [prune(item, schema["items"]) for item in value]
    return copy.deepcopy(value)


def apply_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Fill in schema defaults the way the apiserver does: missing fields of present objects."""
    if isinstance(value, dict) and "properties" in schema:
        result = dict(value)
        for key, prop in schema["properties"].items():
            if key not in result and "default" in prop:
                result[key] = copy.deepcopy(prop["default"])
            if key in result:
                result[key] = apply_defaults(result[key], prop)
        return result
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(item, schema["items"]) for item in value]
    return value


def value_paths(value: Any, path: str = "") -> Iterator[str]:
    """Paths of every field set in an object, spelled like walk() spells schema paths."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{path}.{key}"
            yield from value_paths(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            yield from value_paths(item, f"{path}[]")
