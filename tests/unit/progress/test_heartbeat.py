"""The heartbeat helper a trainer calls, and the parser the operator reads its line back with."""

from __future__ import annotations

import ast
import io
import subprocess
import sys
from pathlib import Path

import pytest

import multinode.progress as progress
from multinode.api.constants import PROGRESS_MARKER, EnvName
from multinode.progress import Heartbeat, format_heartbeat, heartbeat, parse_heartbeat


@pytest.fixture(autouse=True)
def fresh_rate_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "_last_printed", None)


def test_the_line_round_trips_through_the_parser() -> None:
    beat = Heartbeat(120, step_seconds=0.53, samples_per_second=812.5)
    assert parse_heartbeat(format_heartbeat(PROGRESS_MARKER, beat)) == beat
    assert parse_heartbeat(format_heartbeat(PROGRESS_MARKER, Heartbeat(7))) == Heartbeat(7)


@pytest.mark.parametrize("line, expected", [
    ("[default0]:[multinode-progress] step=3 step_seconds=1.5", Heartbeat(3, 1.5)),  # torchrun's prefix
    ("INFO 12:00 [multinode-progress] step=4 extra=ignored samples_per_second=10", Heartbeat(4, None, 10.0)),
    ("[multinode-progress] step=5 step_seconds=nan step_seconds=2", Heartbeat(5)),  # first value wins; nan is none
    ("[multinode-progress] step=6 step_seconds=-1", Heartbeat(6)),
    ("[multinode-progress] step=-1", None),
    ("[multinode-progress] step=abc", None),
    ("[multinode-progress] loss=0.1", None),
    ("step=5 without the marker", None),
    ("", None),
])
def test_parsing_is_strict_about_the_step_and_lenient_about_the_rest(line: str, expected: Heartbeat | None) -> None:
    assert parse_heartbeat(line) == expected


def test_the_helper_prints_only_under_the_operator_and_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.delenv(EnvName.MULTINODE_PROGRESS_MARKER, raising=False)
    assert not heartbeat(1, stream=out) and out.getvalue() == ""
    monkeypatch.setenv(EnvName.MULTINODE_PROGRESS_MARKER, PROGRESS_MARKER)
    assert heartbeat(2, step_seconds=0.25, stream=out)
    assert not heartbeat(3, stream=out)  # within the interval
    assert heartbeat(4, stream=out, min_interval=0)
    assert [parse_heartbeat(line) for line in out.getvalue().splitlines()] == [Heartbeat(2, 0.25), Heartbeat(4)]


def test_the_helper_is_stdlib_only_so_trainers_can_import_or_copy_it() -> None:
    source = Path(progress.__file__).read_text()
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}
    # Importing it loads no third-party package (pydantic would slow every trainer's start).
    code = ("import sys, multinode.progress; "
            "print(sorted(m for m in ('pydantic', 'kopf', 'kubernetes') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
