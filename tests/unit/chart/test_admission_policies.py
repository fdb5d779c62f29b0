"""The chart's ValidatingAdmissionPolicies as rendered: who they match, where they apply, what they name.

What they refuse on a real apiserver is tests/integration/chart/test_admission_policies.py.
"""

from __future__ import annotations

import re

from multinode.api.constants import NAMESPACE_ALLOWANCES
from tests.support.chart import of_kind, render

OPERATOR_USER = "system:serviceaccount:mn-system:mn-multinode-operator"
POLICIES = {f"mn-multinode-operator-{suffix}" for suffix in
            ("operator-objects", "operator-rolebindings", "operator-pods", "operator-pod-updates",
                                 "trainingjobs", "mirror")}


def policies(objects: list[dict]) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in of_kind(objects, "ValidatingAdmissionPolicy")}


def bindings(objects: list[dict]) -> dict[str, dict]:
    return {b["metadata"]["name"]: b for b in of_kind(objects, "ValidatingAdmissionPolicyBinding")}


def expressions(policy: dict) -> str:
    spec = policy["spec"]
    parts = [v["expression"] for v in spec.get("validations", []) + spec.get("variables", [])]
    return "\n".join(parts + [v.get("messageExpression", v.get("message", "")) for v in spec["validations"]])


def test_every_policy_denies_fails_closed_and_is_bound() -> None:
    objects = render()
    found, bound = policies(objects), bindings(objects)
    assert set(found) == set(bound) == POLICIES
    for name, policy in found.items():
        assert policy["spec"]["failurePolicy"] == "Fail", name
        assert bound[name]["spec"] == {"policyName": name, "validationActions": ["Deny"]}, name
        assert all(v.get("reason") == "Forbidden" for v in policy["spec"]["validations"]), name


def test_the_operators_policies_match_its_own_service_account_only() -> None:
    for objects, user in ((render(), OPERATOR_USER),
                          (render("serviceAccount.create=false", "serviceAccount.name=ops", namespace="infra"),
                           "system:serviceaccount:infra:ops")):
        operators = [p for name, p in policies(objects).items() if name.startswith("mn-multinode-operator-operator-")]
        assert len(operators) == 4
        for policy in operators:
            assert policy["spec"]["matchConditions"] == [
                {"name": "the-operator", "expression": f"request.userInfo.username == '{user}'"}]


def test_the_operator_may_bind_only_the_mirror_cluster_role() -> None:
    text = expressions(policies(render())["mn-multinode-operator-operator-rolebindings"])
    assert "object.roleRef.name == 'mn-multinode-operator-mirror'" in text
    assert "size(object.subjects) == 1" in text


def test_protected_namespaces_always_include_the_release_namespace() -> None:
    objects = render("admissionPolicies.protectedNamespaces={kube-system,infra}", namespace="mn-ops")
    for name in ("mn-multinode-operator-operator-objects", "mn-multinode-operator-trainingjobs"):
        assert "request.namespace in ['mn-ops', 'kube-system', 'infra']" in expressions(policies(objects)[name])


def test_the_trainingjob_policy_follows_watched_namespaces() -> None:
    assert "matchResources" not in bindings(render())["mn-multinode-operator-trainingjobs"]["spec"]
    binding = bindings(render("watchNamespaces={team-a,team-b}"))["mn-multinode-operator-trainingjobs"]
    assert binding["spec"]["matchResources"] == {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}]}}


def test_hang_detection_is_refused_only_where_pod_logs_are_not_granted() -> None:
    assert "hangDetection" not in expressions(policies(render())["mn-multinode-operator-trainingjobs"])
    text = expressions(policies(render("rbac.readPodLogs=false"))["mn-multinode-operator-trainingjobs"])
    assert "!has(object.spec.hangDetection)" in text and "rbac.readPodLogs: false" in text


def test_the_namespace_labels_are_the_ones_multinode_names() -> None:
    """The demo, the tests and docs/security.md use the constants; the policies spell the same labels."""
    for name in ("mn-multinode-operator-operator-pods", "mn-multinode-operator-trainingjobs"):
        used = set(re.findall(r"multinode\.dev/allow-[a-z-]+", expressions(policies(render())[name])))
        assert used == set(NAMESPACE_ALLOWANCES), name


def test_the_policies_can_be_left_out() -> None:
    objects = render("admissionPolicies.enabled=false")
    assert not policies(objects) and not bindings(objects)


def test_the_mirrors_cluster_role_and_policy_stay_with_the_kept_crd() -> None:
    """helm uninstall keeps the CRD and so the jobs; their mirrors still need their ClusterRole and policy."""
    def kept(objects: list[dict]) -> set[str]:
        return {f"{o['kind']}/{o['metadata']['name']}" for o in objects
                if (o["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") == "keep"
                and o["kind"] != "CustomResourceDefinition"}

    mirror = "mn-multinode-operator-mirror"
    assert kept(render()) == {f"ClusterRole/{mirror}", f"ValidatingAdmissionPolicy/{mirror}",
                              f"ValidatingAdmissionPolicyBinding/{mirror}"}
    assert kept(render("crds.keep=false")) == set()
