"""The chart's objects as the docs name them exist in what `helm template` renders (the pinned helm, as
tests/unit/chart renders it), for each release name the docs install with; and the chart README's RBAC
table is the rules the chart grants."""

from __future__ import annotations

import re
from functools import cache

import pytest

from tests.support.chart import render
from tests.support.paths import CHART_DIR, rel
from tests.unit.docs.markdown import code_spans, markdown_files, tables

PAGES = markdown_files()
NAMESPACE = "multinode-system"
# A release name that does not contain the chart's name: the full name is then `<release>-multinode-operator`.
OTHER_RELEASE = "ml"


def documented_releases() -> set[str]:
    """Every release name a `helm install` / `helm upgrade --install` in the docs uses for this chart."""
    install = re.compile(r"helm (?:install|upgrade --install) ([a-z0-9-]+) \S*multinode-operator\b")
    return {name for page in PAGES for name in install.findall(page.read_text())}


@cache
def rendered(release: str) -> dict[str, set[str]]:
    """kind → names of the chart's objects for `release` (default values), and the Lease the replicas take."""
    objects = render(release=release, namespace=NAMESPACE)
    names: dict[str, set[str]] = {}
    for obj in objects:
        names.setdefault(obj["kind"], set()).add(obj["metadata"]["name"])
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    names["Lease"] = {env["MULTINODE_LEASE_NAME"]}
    return names


def fullname(release: str) -> str:
    (name,) = rendered(release)["Deployment"]
    return name


def releases() -> list[str]:
    return sorted(documented_releases() | {OTHER_RELEASE})


def test_the_docs_install_the_chart_under_a_name_that_contains_the_charts() -> None:
    """The case the placeholders below must get right: there the full name is the release name."""
    assert "multinode-operator" in documented_releases()
    assert fullname("multinode-operator") == "multinode-operator"
    assert fullname(OTHER_RELEASE) == f"{OTHER_RELEASE}-multinode-operator"


PLACEHOLDER = re.compile(r"(?:<fullname>|<release>)[-a-z0-9]*")


@pytest.mark.parametrize("page", [*PAGES, CHART_DIR / "values.yaml"], ids=rel)
def test_every_object_name_with_a_placeholder_exists_for_every_release(page) -> None:
    """`<fullname>-metrics` is right for any release; `<release>-multinode-operator-metrics` is not
    (with the release `multinode-operator` no such object exists)."""
    text = page.read_text()
    spans = code_spans(text) if page.suffix == ".md" else re.findall(r"`([^`\n]+)`", text)
    wrong = []
    for span in {name for s in spans for name in PLACEHOLDER.findall(s)}:
        for release in releases():
            name = span.replace("<fullname>", fullname(release)).replace("<release>", release)
            if not any(name in names for names in rendered(release).values()):
                wrong.append(f"{span} (release {release}: no object {name})")
    assert wrong == [], f"{rel(page)}"


KINDS = {"deploy": "Deployment", "deployment": "Deployment", "svc": "Service", "service": "Service"}


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_kubectl_reference_to_an_operator_object_exists(page) -> None:
    """`deployment/multinode-operator`, `service/multinode-operator-metrics`: an object of the release the
    docs install."""
    refs = re.findall(r"\b(deploy|deployment|svc|service)/(multinode-operator[-a-z0-9]*)", page.read_text())
    documented = documented_releases()
    missing = [f"{kind}/{name}" for kind, name in refs
               if not any(name in rendered(r).get(KINDS[kind], set()) for r in documented)]
    assert missing == [], f"{rel(page)}"


VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "bind"}


def readme_rights() -> set[tuple[str, str, str]]:
    readme = (CHART_DIR / "README.md").read_text()
    (table,) = [t for t in tables(readme) if t.header[:3] == ["apiGroup", "resource", "verbs"]]
    rights = set()
    for group_cell, resource_cell, verb_cell, *_ in table.rows:
        groups = [g.strip('"') for g in re.findall(r"`([^`]*)`", group_cell)]
        resources = re.findall(r"`([^`]+)`", resource_cell)
        verbs = [v for v in re.findall(r"[a-z]+", verb_cell.split("(")[0]) if v in VERBS]
        rights |= {(g, r, v) for g in groups for r in resources for v in verbs}
    return rights


def chart_rights() -> set[tuple[str, str, str]]:
    objects = render(release="multinode-operator", namespace=NAMESPACE)
    # The operator's own rights; the mirror's ClusterRole (which the operator binds per job) has its own row
    # in the README's list of objects.
    rules = [rule for o in objects if o["kind"] in ("ClusterRole", "Role")
             and o["metadata"]["name"] != "multinode-operator-mirror" for rule in o["rules"]]
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_the_readme_rbac_table_is_what_the_chart_grants() -> None:
    granted, documented = chart_rights(), readme_rights()
    assert sorted(granted - documented) == [], "granted by the chart, missing from its README's RBAC table"
    assert sorted(documented - granted) == [], "in the README's RBAC table, not granted by the chart"
