"""Figures the docs quote from the code or from docs/benchmarks.json are the ones there: the rendezvous ports'
span, the collective test's limits, and measured start times."""

from __future__ import annotations

import json
import re

import pytest

from multinode.api.constants import RENDEZVOUS_PORT_SPAN
from multinode.api.health_check import COLLECTIVE_MEMORY_FACTOR
from multinode.render.health_check_pod import COLLECTIVE_CPU_LIMIT
from multinode.render.pod import PREFLIGHT_MEMORY_LIMIT_MIB
from tests.support.paths import DOCS, rel
from tests.unit.docs.markdown import markdown_files, sentences, tables

PAGES = markdown_files()
BENCHMARKS = json.loads((DOCS / "benchmarks.json").read_text())


def statements(text: str) -> list[str]:
    """Prose sentences and table rows."""
    return [*sentences(text), *(" | ".join(row) for t in tables(text) for row in t.rows)]


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_rendezvous_port_is_described_as_the_base_of_its_ports(page) -> None:
    """MASTER_PORT is rendezvousPort + attempt mod RENDEZVOUS_PORT_SPAN: whatever says rendezvousPort says so,
    or a reader keeps one port free where the job needs RENDEZVOUS_PORT_SPAN."""
    span = (f"mod {RENDEZVOUS_PORT_SPAN}", f"+ {RENDEZVOUS_PORT_SPAN - 1}", f"{RENDEZVOUS_PORT_SPAN} ports",
            f"{RENDEZVOUS_PORT_SPAN} rendezvous ports")
    silent = [s for s in statements(page.read_text()) if "rendezvousPort" in s and not any(w in s for w in span)]
    assert silent == [], f"{rel(page)}"


def test_the_yaml_comment_on_rendezvous_port_gives_the_span() -> None:
    line = next(line for line in (DOCS / "user-guide.md").read_text().splitlines()
                if line.strip().startswith("rendezvousPort:"))
    base = int(re.search(r"rendezvousPort: (\d+)", line).group(1))
    assert f"{base}-{base + RENDEZVOUS_PORT_SPAN - 1}" in line, line


def test_the_collective_tests_limits_are_the_renderers() -> None:
    text = " ".join(sentences((DOCS / "user-guide.md").read_text()))
    match = re.search(r"raised to (\d+) CPUs\s+and (\d+) MiB \+ (\d+) × `sizeMiB`", text)
    assert match, "user-guide.md no longer quotes the collective test's limits"
    assert match.groups() == (COLLECTIVE_CPU_LIMIT, str(PREFLIGHT_MEMORY_LIMIT_MIB), str(COLLECTIVE_MEMORY_FACTOR))


def quotes(pattern: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(rel(page), m.groups()) for page in PAGES if page.name != "benchmarks.md"
            for m in re.finditer(pattern, " ".join(sentences(page.read_text())))]


def test_the_10000_node_start_is_quoted_from_the_newest_run() -> None:
    found = quotes(r"10 000-node job was all Running in (\d+) s")
    assert found, "the docs no longer quote it: drop this test with the quote"
    running = BENCHMARKS["huge"]["huge"]["milestones_s"]["running"]
    assert {groups for _, groups in found} == {(f"{running:.0f}",)}, found


def test_the_1000_pod_gang_figures_are_the_benchmarks_medians() -> None:
    found = quotes(r"1000-pod gang is bound in ([\d.]+) s against ([\d.]+) s")
    assert found, "the docs no longer quote it: drop this test with the quote"
    medians = {r["mode"]: r["median_s"]["scheduled"] for r in BENCHMARKS["gang"]["results"]}
    assert {groups for _, groups in found} == {(f"{medians['gang']:.1f}", f"{medians['nogang']:.1f}")}, found
