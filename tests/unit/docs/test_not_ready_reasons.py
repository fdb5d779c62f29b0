"""Every reason code for "not published yet" is documented where a user looks for it."""

from __future__ import annotations


import pytest

from multinode.checkpoints import NotReady
from tests.support.paths import DOCS


@pytest.mark.parametrize("doc", ["checkpoints.md", "troubleshooting.md"])
def test_every_not_ready_reason_has_a_table_row(doc: str) -> None:
    rows = {line.split("|")[1].strip() for line in (DOCS / doc).read_text().splitlines() if line.startswith("| `")}
    missing = sorted(r.value for r in NotReady if f"`{r.value}`" not in rows)
    assert missing == [], f"docs/{doc} has no row for: {missing}"
