"""The control plane's one Go build (tools/localcluster/build.sh build_kubernetes): Kubernetes, helm and kwok
compiled together so that their shared packages compile once. What sharing must not change is checked on the
binaries `make test` runs: the Kubernetes binaries link exactly the module versions Kubernetes' own go.mod
pins, and helm and kwok are the versions pinned, with helm's default Kubernetes version set.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from localcluster import binaries
from localcluster.cluster import KWOK_STAGE_FILES

VERSIONS = binaries.read_versions()
KUBERNETES_BINARIES = ("kube_apiserver", "kube_controller_manager", "kube_scheduler", "kubectl", "kubelet",
                       "kube_proxy")


def linked_modules(binary: Path) -> dict[str, str]:
    """Module → version a Go binary was built with (`go version -m`; a replacement's version wins)."""
    out = subprocess.run(["go", "version", "-m", str(binary)], capture_output=True, text=True, check=True).stdout
    modules: dict[str, str] = {}
    last = None  # the dep a "=>" line replaces (not the main module's own)
    for fields in (line.split() for line in out.splitlines()):
        if fields and fields[0] == "dep":
            last = fields[1]
            modules[last] = fields[2]
        elif fields and fields[0] == "=>" and last is not None:
            modules[last] = fields[2]
        elif fields:
            last = None
    return modules


@functools.cache
def kubernetes_requirements() -> dict[str, str]:
    """What k8s.io/kubernetes' go.mod requires; its staging modules (required as v0.0.0, replaced by its
    ./staging folders) are the published v0.<minor>.<patch>, as build.sh replaces them."""
    info = subprocess.run(["go", "mod", "download", "-json", f"k8s.io/kubernetes@{VERSIONS['KUBE_VERSION']}"],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "GOSUMDB": "off", "GOTOOLCHAIN": "local"}).stdout
    go_mod = Path(json.loads(info)["GoMod"]).read_text()
    staging = "v0." + VERSIONS["KUBE_VERSION"].removeprefix("v1.")
    return {module: staging if version == "v0.0.0" else version
            for module, version in re.findall(r"^\s+(\S+) (v\S+)(?: // indirect)?$", go_mod, re.MULTILINE)}


@pytest.mark.parametrize("name", KUBERNETES_BINARIES)
def test_a_kubernetes_binary_links_the_versions_kubernetes_pins(name: str) -> None:
    required = kubernetes_requirements()
    linked = linked_modules(getattr(binaries.locate(), name))
    assert len(linked) > 50, linked  # the build info is there
    moved = {m: (v, required.get(m)) for m, v in linked.items() if v != required.get(m)}
    assert moved == {}, f"{name} links other versions than Kubernetes pins (linked, pinned): {moved}"


def test_helm_and_kwok_are_the_pinned_versions_and_helm_knows_the_pinned_kubernetes() -> None:
    found = binaries.locate()
    helm = subprocess.run([str(found.helm), "version", "--template", "{{.Version}}"], capture_output=True,
                          text=True, check=True).stdout
    assert helm == VERSIONS["HELM_VERSION"]
    kwok = subprocess.run([str(found.kwok), "--version"], capture_output=True, text=True, check=True).stdout
    assert VERSIONS["KWOK_VERSION"] in kwok
    assert all((found.kwok_stages / f).is_file() for f in KWOK_STAGE_FILES)  # the ones the cluster runs
    # Without its link-time Kubernetes version helm templates for v1.20, which the chart refuses (>=1.30).
    chart = binaries.REPO_ROOT / "charts" / "multinode-operator"
    rendered = subprocess.run([str(found.helm), "template", "x", str(chart), "--show-only",
                               "templates/deployment.yaml"], check=False, capture_output=True, text=True)
    assert rendered.returncode == 0 and "kind: Deployment" in rendered.stdout, rendered.stderr
