"""Kubernetes quantities: the grammar the CRD validates is the one quantity_value reads, and the value is
Kubernetes' own (Quantity.Value(): base units, rounded up)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from multinode.api.quantity import MAX_QUANTITY_VALUE, QUANTITY_PATTERN, exact_quantity, quantity_value


@pytest.mark.parametrize(("text", "expected"), [
    ("1Gi", 2**30),
    ("16Mi", 16 * 2**20),
    ("1.5Ki", 1536),
    ("1G", 10**9),
    ("2k", 2000),
    ("64", 64),
    ("1e3", 1000),
    ("1E3", 1000),
    ("1.5e+3", 1500),
    ("1e-3", 1),         # rounded up, as Kubernetes does
    ("500m", 1),
    ("2500m", 3),
    ("1n", 1),
    ("0", 0),
    (".5", 1),
    ("0.1Ki", 103),      # 102.4
    ("7Ei", 7 * 2**60),
    ("9E", 9 * 10**18),    # exa, not an exponent
    ("2e1", 20),
])
def test_a_quantity_in_base_units(text: str, expected: int) -> None:
    assert quantity_value(text) == expected
    assert re.fullmatch(QUANTITY_PATTERN, text)


@pytest.mark.parametrize("text", ["lots", "", "-1", "1.2.3", "Gi", "64GB", "1 Gi", " 1Gi", "64Gi\n", "1e", "e3",
                                  "1Ki3"])
def test_what_is_not_a_quantity_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"not a Kubernetes quantity: {text!r}")):
        quantity_value(text)
    assert not re.fullmatch(QUANTITY_PATTERN, text)


@pytest.mark.parametrize("text", ["8Ei", "10E", "1e19", "1e999999999"])
def test_a_quantity_past_int64_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=f"larger than Kubernetes allows \\({MAX_QUANTITY_VALUE}\\)"):
        quantity_value(text)


@pytest.mark.parametrize(("text", "expected"), [("500m", Decimal("0.5")), ("1", 1), ("0.25", Decimal("0.25")),
                                                ("1.5Ki", 1536), ("1e-3", Decimal("0.001"))])
def test_an_exact_quantity_is_not_rounded(text: str, expected: Decimal) -> None:
    assert exact_quantity(text) == expected
