"""Every link to a section of a page (`page.md#section`) lands on a heading of that page, as GitHub names
its anchors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.docs.markdown import markdown_files, without_fences
from tests.support.paths import rel

PAGES = markdown_files()


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(m.group(1)) for m in re.finditer(r"^#+ (.*)$", without_fences(page.read_text()), re.MULTILINE)}


def section_links(page: Path) -> list[tuple[str, str]]:
    return re.findall(r"\]\(([^)\s#]*)#([^)\s]+)\)", without_fences(page.read_text()))


def test_anchors_are_named_as_github_names_them() -> None:
    assert anchor("Kueue: the operator writes `spec.suspend`") == "kueue-the-operator-writes-specsuspend"
    assert sum(len(section_links(p)) for p in PAGES) > 20  # the links are found


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_section_link_lands_on_a_heading(page: Path) -> None:
    known = {p.resolve(): anchors(p) for p in PAGES}
    broken = []
    for target, section in section_links(page):
        path = (page.parent / target).resolve() if target else page.resolve()
        if path in known and section not in known[path]:
            broken.append(f"{target}#{section}")
    assert broken == [], f"{rel(page)}"
