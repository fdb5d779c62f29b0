"""images/operator/Dockerfile, read statically (no Docker engine here: images/operator/README.md)."""

from __future__ import annotations

import re

import yaml

from tests.support.paths import CHART_DIR, REPO

DOCKERFILE = REPO / "images" / "operator" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def test_base_image_is_a_pinned_python_3_11_slim() -> None:
    args = dict(value.split("=", 1) for op, value in instructions() if op == "ARG" and "=" in value)
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", base), base
    froms = [value for op, value in instructions() if op == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS builder", "${PYTHON_IMAGE}"]
    assert "@sha256:<digest>" in DOCKERFILE.read_text(), "the digest pin comment"


def test_final_stage_installs_only_the_built_wheels() -> None:
    ops = instructions()
    first, second = [i for i, (op, _) in enumerate(ops) if op == "FROM"]
    builder, final = ops[first:second], ops[second:]
    runs = " ".join(value for op, value in final if op == "RUN")
    assert "--no-index" in runs and "from=builder" in runs and "--find-links=/wheels" in runs
    assert not [value for op, value in final if op in ("COPY", "ADD")], "the final stage copies no sources"
    assert any(op == "RUN" and "pip wheel" in value for op, value in builder)


def test_runs_as_numeric_non_root_user_with_multinode_entrypoint() -> None:
    ops = instructions()
    (user,) = [value for op, value in ops if op == "USER"]
    uid, gid = user.split(":")
    assert int(uid) > 0 and int(gid) > 0
    assert ("ENTRYPOINT", '["multinode"]') in ops
    assert ("CMD", '["operator"]') in ops
    chart_values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert chart_values["securityContext"] == {"runAsUser": int(uid), "runAsGroup": int(gid)}


def test_the_console_script_the_entrypoint_names_exists() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^multinode = "multinode\.cli\.main:main"$', pyproject, re.M)
