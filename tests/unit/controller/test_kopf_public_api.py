"""kopf through its public API only: no module of the package imports kopf's underscored packages, whose
code changes without notice (import-linter cannot forbid a third-party package's submodules, so this reads
every module's imports)."""

from __future__ import annotations

import ast
from pathlib import Path

import multinode

PACKAGE = Path(multinode.__file__).parent


def private_kopf_imports(source: str) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return [name for name in names if name.startswith("kopf.") and name.split(".")[1].startswith("_")]


def test_the_check_sees_a_private_import() -> None:
    assert private_kopf_imports("from kopf._core.reactor import queueing\nimport kopf._cogs.aiokits\n") == [
        "kopf._core.reactor", "kopf._cogs.aiokits"]
    assert private_kopf_imports("import kopf\nfrom kopf import testing\n") == []


def test_no_module_imports_kopfs_private_packages() -> None:
    found = {str(path.relative_to(PACKAGE)): private
             for path in sorted(PACKAGE.rglob("*.py")) if (private := private_kopf_imports(path.read_text()))}
    assert found == {}


def test_kopf_is_pinned_to_the_version_the_tests_run() -> None:
    # The storm and chaos tests prove kopf's watch behaviour of one version; a range would let a user's
    # install pick another one nobody tested.
    from importlib.metadata import requires, version

    pins = [req for req in requires("multinode-operator") or [] if req.startswith("kopf")]
    assert pins == [f"kopf=={version('kopf')}"]
