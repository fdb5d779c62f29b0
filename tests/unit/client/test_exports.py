"""multinode.client imports its names on first use (PEP 562): each one it lists must be found where its map says."""

from __future__ import annotations

import importlib

import pytest

import multinode.client


@pytest.mark.parametrize("name", multinode.client.__all__)
def test_every_exported_name_loads_from_its_module(name: str) -> None:
    value = getattr(multinode.client, name)
    assert value.__module__.startswith("multinode.client.")
    assert getattr(importlib.import_module(value.__module__), name) is value


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Kube'"):
        multinode.client.Kube  # noqa: B018
