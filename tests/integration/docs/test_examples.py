"""Every example in the repository is applied to the local cluster, so the docs cannot drift from the API.

What is applied:
- every `examples/*.yaml` file;
- every complete manifest in a ```yaml block of README.md and docs/*.md.

The rule for docs: a ```yaml block is split into YAML documents. A document is *complete*, and applied,
when it is a mapping with `apiVersion`, `kind` and `metadata.name`, and also `spec` when it is a
TrainingJob. Anything else (a `spec:` excerpt, a values snippet) is a fragment and is not applied. A block
that is not valid YAML fails the test.

How: each complete manifest is applied with `kubectl apply --dry-run=server` in a fresh namespace (not one
the session operator watches). Kinds the local cluster does not serve (PrometheusRule, Flux's
Kustomization) get their own check: the metrics and phases they name exist. Each example file is also
created for real in a namespace the session operator watches, with the PVCs it names, and must get a
status phase.

Beside the manifests, the facts docs/operations.md and docs/troubleshooting.md restate are checked
against the code: metric names, the operator's and the mirror's RBAC rules, condition reasons and
checkpoint mirror problem reasons.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from multinode.api import GROUP, PLURAL, VERSION, TrainingJob
from multinode.metrics.mirror_metrics import MirrorMetrics
from multinode.metrics.operator import OperatorMetrics
from multinode.render import DEFAULT_MIRROR_CLUSTER_ROLE
from multinode.render.mirror_pod import render_mirror_role_binding
from tests.support import jobs
from tests.support.examples import (
    ALL_MANIFESTS, DOC_MANIFESTS, EXAMPLE_FILES, EXAMPLE_MANIFESTS, Block, Manifest, doc_blocks, documents, is_complete,
    yaml_blocks,
)
from tests.support.paths import CHART_DIR, DOCS, REPO, rel
from localcluster.harness import flux
from localcluster.harness.kube import kubectl, new_namespace
from tests.support.storage import bound_claim
from localcluster.harness.waiting import wait_for

OPERATIONS = DOCS / "operations.md"
TROUBLESHOOTING = DOCS / "troubleshooting.md"
PHASE_TIMEOUT = 60


# ---------------------------------------------------------------------------------------------------------
# What is found


def test_enough_examples_are_found_to_mean_something() -> None:
    doc_jobs = [m for m in DOC_MANIFESTS if m.is_training_job]
    assert len(doc_jobs) > 10, [m.id for m in doc_jobs]
    assert len(EXAMPLE_FILES) >= 9, EXAMPLE_FILES
    # Every example file is one or more complete TrainingJobs, nothing else.
    for path in EXAMPLE_FILES:
        docs = documents(path.read_text())
        assert docs and all(is_complete(d) and d["kind"] == "TrainingJob" for d in docs), rel(path)
    # Each complete TrainingJob in the docs has a name that is unique per file, so the docs never show two
    # different jobs under one name in one place.
    seen: dict[tuple[str, str], str] = {}
    for m in doc_jobs:
        key = (m.source.split(":")[0], m.obj["metadata"]["name"])
        assert key not in seen, f"{m.source} and {seen[key]} both define {key[1]}"
        seen[key] = m.source


@pytest.mark.parametrize("block", doc_blocks(), ids=lambda b: b.source)
def test_every_yaml_block_in_the_docs_parses(block: Block) -> None:
    # safe_load_all raises on a block that does not parse; an empty one shows nothing to a reader either.
    assert documents(block.text), f"{block.source}: a YAML block with no document in it"


# ---------------------------------------------------------------------------------------------------------
# Server-side dry run of every complete manifest


class Discovery:
    """Which kinds the cluster serves, and whether they are namespaced (kubectl get --raw on discovery)."""

    def __init__(self, kubeconfig: str):
        self.kubeconfig = kubeconfig
        self._by_api_version: dict[str, dict[str, bool] | None] = {}

    def namespaced(self, api_version: str, kind: str) -> bool | None:
        """True/False for a served kind, None when the cluster does not serve it."""
        if api_version not in self._by_api_version:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            out = kubectl(self.kubeconfig, "get", "--raw", path, check=False)
            self._by_api_version[api_version] = None if out.returncode != 0 else {
                r["kind"]: r["namespaced"] for r in json.loads(out.stdout)["resources"] if "/" not in r["name"]}
        kinds = self._by_api_version[api_version]
        return None if kinds is None else kinds.get(kind)


@pytest.fixture(scope="module")
def discovery(kubeconfig: str, crd: str) -> Discovery:
    # The cluster serves Flux's kinds too (their CRDs, as `flux install` adds them): the docs' GitRepository,
    # OCIRepository, HelmRelease and Kustomization are dry-run against Flux's own schemas.
    flux.install_crds(kubeconfig)
    return Discovery(kubeconfig)


@pytest.fixture(scope="module")
def dry_run_namespace(core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace no operator watches: a dry run creates nothing, but keep it out of their way."""
    name = new_namespace(core, prefix="docs")
    yield name
    core.delete_namespace(name)


def placed(obj: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    """The object moved into `namespace` (or out of any, for cluster-scoped kinds)."""
    obj = json.loads(json.dumps(obj))
    obj["metadata"].pop("namespace", None)
    if namespace is not None:
        obj["metadata"]["namespace"] = namespace
    return obj


@pytest.mark.parametrize("manifest", ALL_MANIFESTS, ids=lambda m: m.id)
def test_server_dry_run(manifest: Manifest, kubeconfig: str, discovery: Discovery, dry_run_namespace: str) -> None:
    obj = manifest.obj
    namespaced = discovery.namespaced(obj["apiVersion"], obj["kind"])
    if namespaced is None:
        # Kinds of other projects the local cluster does not serve get a check of their own instead.
        check_unserved(manifest)
        return
    body = placed(obj, dry_run_namespace if namespaced else None)
    out = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(body), check=False)
    assert out.returncode == 0, f"{manifest.source}: the apiserver refused {manifest.id}:\n{out.stderr}"
    assert "(server dry run)" in out.stdout, out.stdout


def _metric_names() -> set[str]:
    """Every series name the operator and the mirror can expose, samples or not yet."""
    operator = OperatorMetrics()
    operator.watch_state(dict, lambda: 0)
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    names = set()
    for registry in (operator.registry, MirrorMetrics().registry):
        for family in registry.collect():
            names |= {family.name + suffix for suffix in suffixes.get(family.type, ("",))}
    return names


def check_unserved(manifest: Manifest) -> None:
    """PrometheusRule: every multinode metric its PromQL names exists. Argo CD Application: what it tells
    Argo CD to ignore is a field of the TrainingJob. Anything else unserved is an error in the docs."""
    obj = manifest.obj
    kind = (obj["apiVersion"].split("/")[0], obj["kind"])
    if kind == ("monitoring.coreos.com", "PrometheusRule"):
        exprs = [r["expr"] for g in obj["spec"]["groups"] for r in g["rules"]]
        used = {name for e in exprs for name in re.findall(r"\b(multinode_[a-z_]+)", e)}
        assert used and used <= _metric_names(), f"{manifest.source}: unknown metrics {used - _metric_names()}"
    elif kind == ("argoproj.io", "Application"):
        from multinode.api import KIND
        from multinode.api.crd import render_crd

        schema = render_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for ignored in obj["spec"]["ignoreDifferences"]:
            assert (ignored["group"], ignored["kind"]) == (GROUP, KIND), f"{manifest.source}: {ignored}"
            for pointer in ignored["jsonPointers"]:
                node = schema
                for part in pointer.strip("/").split("/"):
                    node = node["properties"][part]  # a KeyError names a field the TrainingJob does not have
    else:
        raise AssertionError(f"{manifest.source}: {obj['apiVersion']} {obj['kind']} is neither served nor checked")


def test_some_non_trainingjob_manifests_in_the_docs_are_applied_too(discovery: Discovery) -> None:
    """The docs' other manifests meant for the cluster (PVC, NetworkPolicy, RBAC, Argo's ConfigMap)."""
    served = [m.id for m in DOC_MANIFESTS
              if not m.is_training_job and discovery.namespaced(m.obj["apiVersion"], m.obj["kind"]) is not None]
    assert len(served) >= 4, served


# ---------------------------------------------------------------------------------------------------------
# Each example created for real: the session operator gives it a status phase


def claim_names(obj: dict[str, Any]) -> list[str]:
    spec = obj.get("spec") or {}
    names = [(spec.get(key) or {}).get("claimName") for key in ("cache", "checkpointing")]
    names += [(v.get("persistentVolumeClaim") or {}).get("claimName")
              for v in (spec.get("podTemplate") or {}).get("volumes") or []]
    return sorted({n for n in names if n})


@pytest.mark.parametrize("manifest", EXAMPLE_MANIFESTS, ids=lambda m: m.id)
def test_example_gets_a_status_phase(manifest: Manifest, api: client.ApiClient, core: client.CoreV1Api,
                                     kubeconfig: str, job_namespace: str) -> None:
    ns, custom = job_namespace, client.CustomObjectsApi(api)
    name = manifest.obj["metadata"]["name"]
    volumes = [bound_claim(core, ns, claim) for claim in claim_names(manifest.obj)]
    try:
        jobs.apply(kubeconfig, ns, placed(manifest.obj, ns))

        def phase() -> str | None:
            return (jobs.get_job(custom, ns, name).get("status") or {}).get("phase")

        got = wait_for(phase, timeout=PHASE_TIMEOUT, what=f"{manifest.id}: a status phase")
        if manifest.obj["spec"].get("suspend"):
            assert got == "Suspended"
            assert jobs.job_pods(core, ns, name) == []
    finally:
        # The shared cluster's GPUs are for every test: give them back before the next example.
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        wait_for(lambda: not core.list_namespaced_pod(ns).items, timeout=60, what=f"{manifest.id}: pods gone")
        for pv in volumes:
            core.delete_persistent_volume(pv)


# ---------------------------------------------------------------------------------------------------------
# Facts the operations and troubleshooting docs restate


def metric_names() -> tuple[set[str], set[str]]:
    """(families, names a doc may use: families and their samples) of the operator's and the mirror's metrics."""
    operator = OperatorMetrics()
    operator.watch_state(dict, lambda: 0)
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    families, usable = set(), set()
    for registry in (operator.registry, MirrorMetrics().registry):
        for family in registry.collect():
            families.add(family.name)
            usable |= {family.name, *(family.name + s for s in suffixes[family.type])}
    return families, usable


def test_operations_md_names_only_metrics_that_exist_and_every_one_that_does() -> None:
    text = OPERATIONS.read_text()
    families, usable = metric_names()
    named = set(re.findall(r"\bmultinode_[a-z_]+\b", text))
    assert named - usable == set(), "docs/operations.md names metrics the code does not have"
    documented = {f for f in families if f in named or f + "_total" in named}
    assert documented == families, f"undocumented metrics: {families - documented}"


def documented(kind: str, name: str) -> dict[str, Any]:
    for block in yaml_blocks(OPERATIONS):
        for doc in documents(block.text):
            if is_complete(doc) and doc["kind"] == kind and doc["metadata"]["name"] == name:
                return doc
    raise AssertionError(f"no {kind} {name} in docs/operations.md")


def normalized(rules: list[dict[str, Any]]) -> list[tuple]:
    return sorted((tuple(sorted(r.get("apiGroups") or [])), tuple(sorted(r.get("resources") or [])),
                   tuple(sorted(r.get("resourceNames") or [])), tuple(sorted(r.get("verbs") or [])))
                  for r in rules)


def test_operator_rbac_in_operations_md_is_what_the_chart_grants() -> None:
    """Both ClusterRoles: the operator's and the one it binds each job's mirror to."""
    assert shutil.which("helm"), "helm is not on PATH (make test puts the pinned one there)"
    assert (CHART_DIR / "Chart.yaml").exists(), f"no chart at {rel(CHART_DIR)}"
    rendered = subprocess.run(["helm", "template", "multinode-operator", str(CHART_DIR), "-n", "multinode-system",
                               "--kube-version", "1.36.0"], capture_output=True, text=True, timeout=60, check=False)
    assert rendered.returncode == 0, rendered.stderr
    chart_roles = {d["metadata"]["name"]: d for d in yaml.safe_load_all(rendered.stdout)
                   if d and d.get("kind") == "ClusterRole"}
    assert set(chart_roles) == {"multinode-operator", DEFAULT_MIRROR_CLUSTER_ROLE}
    for name, role in chart_roles.items():
        assert normalized(documented("ClusterRole", name)["rules"]) == normalized(role["rules"]), name


def test_leader_election_role_in_operations_md_is_what_the_chart_grants() -> None:
    assert shutil.which("helm"), "helm is not on PATH (make test puts the pinned one there)"
    rendered = subprocess.run(["helm", "template", "multinode-operator", str(CHART_DIR), "-n", "multinode-system",
                               "--kube-version", "1.36.0"], capture_output=True, text=True, timeout=60, check=False)
    assert rendered.returncode == 0, rendered.stderr
    (chart_role,) = [d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") == "Role"
                     and d["metadata"]["name"].endswith("-leader-election")]
    (doc_role,) = [d for b in yaml_blocks(OPERATIONS) for d in documents(b.text) if is_complete(d)
                   and d["kind"] == "Role" and d["metadata"]["name"].endswith("-leader-election")]
    assert doc_role["metadata"]["namespace"] == chart_role["metadata"]["namespace"]
    assert normalized(doc_role["rules"]) == normalized(chart_role["rules"])


def test_mirror_binding_in_operations_md_is_what_the_operator_creates() -> None:
    doc = documented("RoleBinding", "llama-mirror")
    job = TrainingJob.model_validate({
        "metadata": {"name": "llama", "namespace": doc["metadata"]["namespace"],
                     "uid": "00000000-0000-4000-8000-000000000001"},
        "spec": {"numNodes": 2, "image": "x", "cache": {"claimName": "c"}, "checkpointing": {"claimName": "k"}}})
    binding = render_mirror_role_binding(job)
    assert (doc["roleRef"], doc["subjects"]) == (binding["roleRef"], binding["subjects"])


def camel_constants(paths: list[Path], pattern: str = r"[A-Z][A-Za-z]+") -> set[str]:
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(pattern, node.value):
                found.add(node.value)
    return found


def test_troubleshooting_md_lists_every_reason_the_operator_sets() -> None:
    """Every CamelCase word in the planner and the worker: condition reasons, event reasons, and the pod and
    container reasons they translate (ErrImagePull → ImagePullFailing)."""
    package = REPO / "operator" / "multinode"
    sources = [package / "reconcile" / f for f in ("plan.py", "failures.py", "checkpointing.py", "lifecycle.py")]
    controller = [package / "controller" / f for f in ("reconciler.py", "observe.py", "apply.py", "workers.py")]
    reasons = camel_constants([*sources, *controller])
    reasons -= {"True", "False", "Normal", "Warning", "Pending", "Unknown", "Pod"}   # Pod: a kind the worker reads
    text = TROUBLESHOOTING.read_text()
    missing = sorted(r for r in reasons if f"`{r}`" not in text)
    assert missing == [], f"docs/troubleshooting.md does not explain: {missing}"


def test_troubleshooting_md_lists_every_checkpoint_mirror_problem() -> None:
    package = REPO / "operator" / "multinode" / "checkpoints"
    # The engine's own problems, and the refusals of reasons.py it reports as problems (with NotReady's codes).
    reasons = camel_constants([package / "mirror_pass.py", package / "publish.py", package / "reasons.py"],
                              r"[A-Z][a-z]+(?:[A-Z][a-z]*)+")
    text = TROUBLESHOOTING.read_text()
    assert len(reasons) >= 10, reasons
    missing = sorted(r for r in reasons if f"`{r}`" not in text)
    assert missing == [], f"docs/troubleshooting.md does not explain: {missing}"
