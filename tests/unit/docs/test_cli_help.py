"""`multinode operator --help` says what the code does with each setting: the image it names runs every
container the renderer gives it, the liveness example is the chart's health port and not the metrics port,
and the namespace globs it takes are followed by the operator and refused by the chart."""

from __future__ import annotations

import argparse
import re

import yaml
from multinode.testing import stored_job

from multinode.api.constants import OPERATOR_METRICS_PORT
from multinode.cli.main import build_parser
from multinode.controller.watches import is_pattern, namespace_matcher
from multinode.render import RenderSettings, render_node_pod
from multinode.render.mirror_pod import render_mirror_pod
from tests.support.chart import template
from tests.support.paths import CHART_DIR, DOCS
from tests.unit.docs.markdown import paragraphs, tables

VALUES = yaml.safe_load((CHART_DIR / "values.yaml").read_text())


def operator_help() -> dict[str, str]:
    """Each option of `multinode operator` → its help text."""
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {opt: action.help or "" for action in sub.choices["operator"]._actions for opt in action.option_strings}


def containers_running(image: str) -> set[str]:
    """The containers of a checkpointed job's node and mirror pods that the renderer gives `image`."""
    settings = RenderSettings(operator_image=image)
    job = stored_job(2, cache={"claimName": "cache"}, checkpointing={"claimName": "ckpt"})
    pods = [render_node_pod(job, 0, 0, settings), render_mirror_pod(job, settings)]
    return {c["name"] for pod in pods for key in ("initContainers", "containers")
            for c in pod["spec"].get(key, []) if c["image"] == image}


def test_the_operator_image_help_names_every_container_the_image_runs() -> None:
    running = containers_running("registry.example/operator@sha256:" + "0" * 64)
    assert running == {"preflight", "mirror"}  # what the help should name; a new one must be named too
    text = operator_help()["--operator-image"]
    assert [name for name in sorted(running) if name not in text] == [], text


def test_the_liveness_example_is_the_charts_health_port_not_the_metrics_port() -> None:
    text = operator_help()["--liveness"]
    port = int(re.search(r"http://[\d.]+:(\d+)/healthz", text).group(1))
    assert port == VALUES["health"]["port"]
    assert port != int(build_parser().parse_args(["operator"]).metrics_port) == OPERATOR_METRICS_PORT
    assert VALUES["metrics"]["port"] == OPERATOR_METRICS_PORT


def test_the_namespace_help_gives_a_glob_the_operator_follows() -> None:
    text = operator_help()["--namespace"]
    globs = [g for g in re.findall(r"[!\w-]+\*?", text) if is_pattern(g)]
    assert globs, text
    include = next(g for g in globs if not g.startswith("!"))
    assert namespace_matcher((include,))(include.replace("*", "a"))


def test_the_docs_say_the_command_takes_globs_and_the_chart_refuses_them() -> None:
    """The helm render of the glob the docs give fails; operations.md's settings row and the chart's README
    each say both halves."""
    (settings,) = [t for t in tables((DOCS / "operations.md").read_text()) if t.header[:2] == ["setting", "env / flag"]]
    (row,) = [" ".join(r) for r in settings.rows if r[0] == "namespaces"]
    glob = next(g for g in re.findall(r"`([^`]+)`", row) if is_pattern(g))
    assert glob in operator_help()["--namespace"]
    refused = template(f"watchNamespaces={{{glob}}}", check=False)
    assert refused.returncode != 0 and "watchNamespaces" in refused.stderr
    assert "--namespace" in row and "chart refuses" in row, row
    readme = paragraphs((CHART_DIR / "README.md").read_text())
    (bullet,) = [p for p in readme if p.startswith("- `watchNamespaces: [a, b]`")]
    assert "refused" in bullet and "`multinode operator --namespace`" in bullet, bullet
