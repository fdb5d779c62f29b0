"""Kubernetes resource quantities ("500m", "64Gi", "1e3"): the grammar the CRD validates, and their value.

One grammar for both sides: the models put QUANTITY_PATTERN into the CRD, so the apiserver refuses what the
preflight (which turns spec.shmSize into bytes) could not read.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

# Without a sign: negative quantities are meaningless for resources and would only fail at pod creation.
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# The pattern's groups: the number, the suffix, and the suffix when it is an exponent ("e3"; "E" and "Ei" are
# the exa suffixes).
_NUMBER_GROUP, _SUFFIX_GROUP, _EXPONENT_GROUP = 1, 5, 7
# Kubernetes' Quantity.Value() is an int64.
MAX_QUANTITY_VALUE = 2**63 - 1
_MULTIPLIERS = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50),
    "Ei": Decimal(2**60), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def quantity_value(quantity: str) -> int:
    """The quantity in base units (bytes, cores), rounded up as Kubernetes' Quantity.Value() does: "16Mi" is
    16777216, "500m" is 1. Raises ValueError naming the text when it is not a quantity."""
    return math.ceil(exact_quantity(quantity))


def exact_quantity(quantity: str) -> Decimal:
    """The quantity in base units, not rounded: "500m" is 0.5, for comparing CPU quantities. Raises ValueError
    naming the text when it is not a quantity, or past what Kubernetes allows."""
    match = re.fullmatch(QUANTITY_PATTERN, quantity)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r} (for example 64Gi, 500m or 1e3)")
    number, suffix = Decimal(match.group(_NUMBER_GROUP)), match.group(_SUFFIX_GROUP) or ""
    try:
        exponent = match.group(_EXPONENT_GROUP)
        value = number.scaleb(Decimal(exponent[1:])) if exponent else number * _MULTIPLIERS[suffix]
    except ArithmeticError:  # an exponent past what Decimal holds
        value = Decimal("Infinity")
    if value > MAX_QUANTITY_VALUE:
        raise ValueError(f"quantity {quantity!r} is larger than Kubernetes allows ({MAX_QUANTITY_VALUE})")
    return value
