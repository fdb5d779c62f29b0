"""The Helm chart, rendered with the pinned helm: lint, RBAC, the Deployment, values, schema and the CRD copy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from multinode.api import TrainingJob
from multinode.api.crd import render_crd, render_crd_yaml
from multinode.render.mirror_pod import MIRROR_RULES, render_mirror_pod
from multinode.render.settings import OPERATOR_IMAGE_REPOSITORY
from tests.support.paths import CHART_DIR, REPO
from tests.support.binaries import KUBE_VERSION
from tests.support.chart import helm, of_kind, one, render, template

DIGEST = "sha256:" + "ab" * 32
REPOSITORY = OPERATOR_IMAGE_REPOSITORY

# (apiGroup, resource, verb): exactly the operator's API calls (operator/multinode/controller), nothing more.
NAMESPACED_RIGHTS = {
    *(("multinode.dev", "trainingjobs", v) for v in ("list", "watch", "delete", "patch")),
    ("multinode.dev", "trainingjobs/status", "patch"),
    *(("", "pods", v) for v in ("get", "list", "watch", "create", "delete", "patch")),
    ("", "pods/log", "get"),
    *(("", "services", v) for v in ("get", "list", "watch", "create")),
    # get: only after a create got 409, to see whether the object there is the job's own (controller/ownership.py)
    *(("", "configmaps", v) for v in ("get", "create", "delete")),
    *(("", "serviceaccounts", v) for v in ("get", "create")),
    *(("rbac.authorization.k8s.io", "rolebindings", v) for v in ("get", "create")),
    ("rbac.authorization.k8s.io", "clusterroles", "bind"),  # the mirror ClusterRole only (resourceNames)
    ("", "events", "create"),
    *(("policy", "poddisruptionbudgets", v) for v in ("get", "create")),  # beforeDisruptionSeconds: a drain waits
    *(("scheduling.k8s.io", "podgroups", v) for v in ("get", "list", "watch", "create", "delete")),
    *((g, "podgroups", v) for g in ("scheduling.volcano.sh", "scheduling.x-k8s.io")
      for v in ("get", "list", "create", "delete")),
    *(("kueue.x-k8s.io", "workloads", v) for v in ("get", "list", "watch", "create", "delete")),
    ("kueue.x-k8s.io", "workloads/status", "patch"),
}
CLUSTER_RIGHTS = {("", "nodes", "list"), ("", "nodes", "watch"), ("kueue.x-k8s.io", "resourceflavors", "list"),
                  ("kueue.x-k8s.io", "resourceflavors", "watch"), ("scheduling.k8s.io", "priorityclasses", "get")}
# Leader election, in the release namespace only (a Role of its own): create any Lease, get and update its own.
LEASE_RIGHTS = {("coordination.k8s.io", "leases", v) for v in ("create", "get", "update")}
LEASE_ROLE = "mn-multinode-operator-leader-election"
# The kubelets' Leases, listed for jobs with hot spares (a Role in kube-node-lease).
NODE_LEASES_ROLE = "mn-multinode-operator-node-leases"
MIRROR_CLUSTER_ROLE = "mn-multinode-operator-mirror"

VARIANTS = {
    "default": (),
    "namespaces": ("watchNamespaces={team-a,team-b}",),
    "everything": ("metrics.serviceMonitor.enabled=true", "metrics.mirrorPodMonitor.enabled=true",
                   "dashboard.enabled=true", "image.digest=" + DIGEST, "logLevel=debug",
                   "rbac.ownerReferencesPermissionEnforcement=true"),
    "no-crd-no-metrics": ("crds.enabled=false", "metrics.enabled=false", "replicaCount=0"),
    "single-no-election": ("replicaCount=1", "leaderElection.enabled=false"),
}


def job_roles(objects: list[dict], kind: str) -> list[dict]:
    """Roles (or RoleBindings) for the jobs' namespaces: all but the leader election one and the node leases'."""
    return [o for o in of_kind(objects, kind) if o["metadata"]["name"] not in (LEASE_ROLE, NODE_LEASES_ROLE)]


def operator_cluster_role(objects: list[dict]) -> dict:
    """The operator's ClusterRole (the other one is the mirrors')."""
    (role,) = [r for r in of_kind(objects, "ClusterRole") if r["metadata"]["name"] != MIRROR_CLUSTER_ROLE]
    return role


def rights(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def pod_spec(objects: list[dict]) -> dict:
    return one(objects, "Deployment")["spec"]["template"]["spec"]


def container(objects: list[dict]) -> dict:
    (c,) = pod_spec(objects)["containers"]
    return c


def env(objects: list[dict]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container(objects)["env"]}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def rendered(request: pytest.FixtureRequest) -> list[dict]:
    return render(*VARIANTS[request.param])


@pytest.fixture(scope="module")
def default() -> list[dict]:
    return render()


def test_helm_lint_passes() -> None:
    for sets in VARIANTS.values():
        args = [a for s in sets for a in ("--set", s)]
        result = helm("lint", "--strict", str(CHART_DIR), "--kube-version", KUBE_VERSION, *args)
        assert "0 chart(s) failed" in result.stdout


# --- RBAC ---------------------------------------------------------------------------------------------

def test_rbac_has_no_wildcards_and_never_secrets(rendered: list[dict]) -> None:
    roles = of_kind(rendered, "ClusterRole") + of_kind(rendered, "Role")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key] and not any("*" in item for item in rule[key]), (role["metadata"], rule)
            assert not {"secrets", "secrets/*", "roles", "clusterrolebindings"} & set(rule["resources"]), rule
            assert not {"escalate", "impersonate"} & set(rule["verbs"]), rule
            assert not rule.get("nonResourceURLs"), rule
            # bind, only of the mirror ClusterRole: the one right the operator hands out.
            if "bind" in rule["verbs"]:
                assert (rule["resources"], rule["resourceNames"], rule["verbs"]) == (
                    ["clusterroles"], [MIRROR_CLUSTER_ROLE], ["bind"]), rule


def test_all_namespaces_mode_binds_one_cluster_role_with_exactly_the_operators_rights(default: list[dict]) -> None:
    role = operator_cluster_role(default)
    assert rights(role["rules"]) == NAMESPACED_RIGHTS | CLUSTER_RIGHTS
    binding = one(default, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    sa = one(default, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": "mn-system"}]
    assert pod_spec(default)["serviceAccountName"] == sa["metadata"]["name"]
    assert not job_roles(default, "Role") and not job_roles(default, "RoleBinding")
    assert "--namespace" not in " ".join(container(default)["args"])


def test_namespace_list_mode_renders_a_role_per_namespace_and_a_node_only_cluster_role() -> None:
    objects = render("watchNamespaces={team-a,team-b}")
    assert rights(operator_cluster_role(objects)["rules"]) == CLUSTER_RIGHTS
    assert one(objects, "ClusterRoleBinding")["roleRef"]["name"] == operator_cluster_role(objects)["metadata"]["name"]
    roles = {r["metadata"]["namespace"]: r for r in job_roles(objects, "Role")}
    bindings = {b["metadata"]["namespace"]: b for b in job_roles(objects, "RoleBinding")}
    assert set(roles) == set(bindings) == {"team-a", "team-b"}
    sa = one(objects, "ServiceAccount")["metadata"]["name"]
    for ns, role in roles.items():
        assert rights(role["rules"]) == NAMESPACED_RIGHTS
        assert bindings[ns]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                           "name": role["metadata"]["name"]}
        assert bindings[ns]["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "mn-system"}]
    args = container(objects)["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=team-a", "--namespace=team-b"]


def test_the_mirror_cluster_role_grants_what_the_mirror_calls_and_the_operator_may_bind_only_it() -> None:
    """The operator creates no Roles: each job's mirror is bound to the chart's ClusterRole, which the
    operator may bind (RBAC lets a binding be made by who holds `bind` on its role) without holding its rights."""
    for sets in (VARIANTS["default"], VARIANTS["namespaces"]):
        objects = render(*sets)
        (mirror,) = [r for r in of_kind(objects, "ClusterRole") if r["metadata"]["name"] == MIRROR_CLUSTER_ROLE]
        assert mirror["rules"] == MIRROR_RULES
        assert env(objects)["MULTINODE_MIRROR_CLUSTER_ROLE"] == MIRROR_CLUSTER_ROLE
        for role in job_roles(objects, "Role") or [operator_cluster_role(objects)]:
            binds = [r for r in role["rules"] if "bind" in r["verbs"]]
            assert binds == [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                              "resourceNames": [MIRROR_CLUSTER_ROLE], "verbs": ["bind"]}]


def test_pod_logs_only_while_hang_detection_may_read_them() -> None:
    assert ("", "pods/log", "get") in rights(operator_cluster_role(render())["rules"])
    assert ("", "pods/log", "get") not in rights(operator_cluster_role(render("rbac.readPodLogs=false"))["rules"])


ELECTION_ENV = {
    "MULTINODE_LEADER_ELECTION": "true", "MULTINODE_LEASE_NAME": "mn-multinode-operator",
    "MULTINODE_LEASE_DURATION_SECONDS": "15", "MULTINODE_RENEW_DEADLINE_SECONDS": "10",
    "MULTINODE_RETRY_PERIOD_SECONDS": "2", "POD_NAME": None, "POD_NAMESPACE": None,
}


def test_leader_election_by_default_two_replicas_a_lease_role_a_pdb_and_spread_across_nodes(
        default: list[dict]) -> None:
    role = next(r for r in of_kind(default, "Role") if r["metadata"]["name"] == LEASE_ROLE)
    assert role["metadata"]["namespace"] == "mn-system"
    assert rights(role["rules"]) == LEASE_RIGHTS
    # get and update only the release's own Lease (create cannot be limited to a name).
    assert [r.get("resourceNames") for r in role["rules"]] == [None, ["mn-multinode-operator"]]
    binding = next(b for b in of_kind(default, "RoleBinding") if b["metadata"]["name"] == LEASE_ROLE)
    assert binding["roleRef"]["name"] == LEASE_ROLE and binding["subjects"][0]["namespace"] == "mn-system"
    assert not any(("coordination.k8s.io", "leases") == (g, r) for g, r, _ in rights(
        operator_cluster_role(default)["rules"])), "no cluster-wide Lease rights"
    c = container(default)
    downward = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if "valueFrom" in e}
    assert downward == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    pdb = one(default, "PodDisruptionBudget")
    selector = one(default, "Deployment")["spec"]["selector"]
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": selector}
    (term,) = pod_spec(default)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}


def test_without_leader_election_one_replica_no_lease_rights_no_pdb() -> None:
    objects = render(*VARIANTS["single-no-election"])
    assert not [r for r in of_kind(objects, "Role") if r["metadata"]["name"] == LEASE_ROLE]
    assert not of_kind(objects, "PodDisruptionBudget")
    assert "affinity" not in pod_spec(objects)
    assert not {"MULTINODE_LEADER_ELECTION", "POD_NAME"} & set(env(objects))


@pytest.mark.parametrize(("sets", "named"), [
    (("leaderElection.enabled=false",), "replicaCount above 1 needs leaderElection.enabled"),
    (("leaderElection.renewDeadlineSeconds=15",),
     "leaseDurationSeconds (15) must exceed renewDeadlineSeconds + retryPeriodSeconds (15 + 2)"),
    # Accepted once: the old leader could act until 18 s after its last renewal, a standby took over at 11 s.
    (("leaderElection.leaseDurationSeconds=11", "leaderElection.retryPeriodSeconds=8"),
     "leaseDurationSeconds (11) must exceed renewDeadlineSeconds + retryPeriodSeconds (10 + 8)"),
    (("leaderElection.leaseDurationSeconds=30", "leaderElection.retryPeriodSeconds=9"),
     "renewDeadlineSeconds must exceed 1.2"),
])
def test_unsafe_replica_and_timing_combinations_fail(sets: tuple[str, ...], named: str) -> None:
    result = template(*sets, check=False)
    assert result.returncode != 0 and named in result.stderr, result.stderr


def test_finalizers_right_only_on_request() -> None:
    extra = ("multinode.dev", "trainingjobs/finalizers", "update")
    assert extra not in rights(operator_cluster_role(render())["rules"])
    assert extra in rights(operator_cluster_role(render("rbac.ownerReferencesPermissionEnforcement=true"))["rules"])


def test_rbac_and_service_account_can_be_left_out() -> None:
    objects = render("rbac.create=false", "serviceAccount.create=false", "serviceAccount.name=ops")
    kinds = {o["kind"] for o in objects}
    assert not {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"} & kinds
    assert pod_spec(objects)["serviceAccountName"] == "ops"
    failed = template("serviceAccount.create=false", check=False)
    assert failed.returncode != 0 and "serviceAccount.name is required" in failed.stderr


# --- the Deployment -------------------------------------------------------------------------------------

def assert_restricted(spec: dict) -> None:
    """PodSecurity `restricted` (v1.36), at pod and container level."""
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True
    assert isinstance(pod["runAsUser"], int) and pod["runAsUser"] > 0
    assert isinstance(pod["runAsGroup"], int) and pod["runAsGroup"] > 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for key in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        assert not spec.get(key), key
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                       "projected", "secret"}
    for volume in spec.get("volumes", []):
        assert set(volume) - {"name"} <= allowed_volumes, volume
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert isinstance(sc["runAsUser"], int) and sc["runAsUser"] > 0
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc.get("privileged", False) is False
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not c.get("ports") or all("hostPort" not in p for p in c["ports"])


def test_deployment_meets_restricted_and_overlaps_replicas_only_with_leader_election(rendered: list[dict]) -> None:
    deployment = one(rendered, "Deployment")
    election = "MULTINODE_LEADER_ELECTION" in env(rendered)
    if election:
        assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                                  "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    else:
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}
        assert deployment["spec"]["replicas"] in (0, 1)
    assert_restricted(deployment["spec"]["template"]["spec"])
    mounts = {m["mountPath"]: m["name"] for m in container(rendered)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(rendered)["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_default_deployment(default: list[dict]) -> None:
    deployment = one(default, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["metadata"]["namespace"] == "mn-system"
    c = container(default)
    assert c["args"] == ["operator", "--liveness=http://0.0.0.0:8081/healthz", "--metrics-port=8080"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"health": 8081, "metrics": 8080}
    assert c["image"] == f"{REPOSITORY}:{yaml.safe_load((CHART_DIR / 'Chart.yaml').read_text())['appVersion']}"
    assert env(default) == {
        "MULTINODE_OPERATOR_IMAGE": c["image"],
        "MULTINODE_WORKERS": "8", "MULTINODE_API_CONCURRENCY": "16",
        "MULTINODE_API_TIMEOUT_SECONDS": "30", "MULTINODE_PREFLIGHT_TIMEOUT_SECONDS": "300",
        "MULTINODE_RESYNC_SECONDS": "60", "MULTINODE_MIRROR_CLUSTER_ROLE": MIRROR_CLUSTER_ROLE,
        **ELECTION_ENV,
    }
    assert c["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    service = one(default, "Service")
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]
    assert not {"ServiceMonitor", "PodMonitor", "ConfigMap"} & {o["kind"] for o in default}


@pytest.mark.parametrize(("sets", "image"), [
    ((), None),
    (("image.tag=1.2.3",), f"{REPOSITORY}:1.2.3"),
    (("image.digest=" + DIGEST,), f"{REPOSITORY}@{DIGEST}"),
    (("image.tag=1.2.3", "image.digest=" + DIGEST), f"{REPOSITORY}@{DIGEST}"),
    (("image.repository=registry.example:5000/mn", "image.tag=dev"), "registry.example:5000/mn:dev"),
])
def test_image_digest_wins_over_tag_and_the_jobs_run_the_same_image(sets: tuple, image: str | None) -> None:
    objects = render(*sets)
    app_version = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["appVersion"]
    expected = image or f"{REPOSITORY}:{app_version}"
    assert container(objects)["image"] == expected
    assert env(objects)["MULTINODE_OPERATOR_IMAGE"] == expected


def test_values_reach_the_pod() -> None:
    values = {
        "operator": {"workers": 3, "apiConcurrency": 7, "apiTimeoutSeconds": 12.5, "preflightTimeoutSeconds": 90,
                     "resyncSeconds": 45},
        "logLevel": "debug",
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                     {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "image": {"pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}},
        "priorityClassName": "system-cluster-critical",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": 2, "memory": "2Gi"}},
        "podAnnotations": {"a": "b"},
        "podLabels": {"team": "ml"},
        "commonLabels": {"cost-center": "42"},
        "securityContext": {"runAsUser": 1000, "runAsGroup": 1001},
        "health": {"port": 9000},
        "metrics": {"port": 9100},
    }
    objects = render(values=values)
    spec, c = pod_spec(objects), container(objects)
    assert env(objects) == {
        "MULTINODE_OPERATOR_IMAGE": c["image"], "MULTINODE_WORKERS": "3", "MULTINODE_API_CONCURRENCY": "7",
        "MULTINODE_API_TIMEOUT_SECONDS": "12.5", "MULTINODE_PREFLIGHT_TIMEOUT_SECONDS": "90",
        "MULTINODE_RESYNC_SECONDS": "45", "MULTINODE_MIRROR_CLUSTER_ROLE": MIRROR_CLUSTER_ROLE, **ELECTION_ENV,
        "HTTPS_PROXY": "http://proxy:3128", "NODE": None}
    assert {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c["env"]
    assert c["args"] == ["operator", "--liveness=http://0.0.0.0:9000/healthz", "--metrics-port=9100", "--verbose"]
    assert c["imagePullPolicy"] == "Always"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["nodeSelector"] == values["nodeSelector"]
    assert spec["tolerations"] == values["tolerations"]
    assert spec["affinity"] == values["affinity"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert c["resources"] == values["resources"]
    assert spec["securityContext"]["runAsUser"] == c["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["runAsGroup"] == c["securityContext"]["runAsGroup"] == 1001
    template_meta = one(objects, "Deployment")["spec"]["template"]["metadata"]
    assert template_meta["annotations"] == {"a": "b"} and template_meta["labels"]["team"] == "ml"
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"health": 9000, "metrics": 9100}
    assert one(objects, "Service")["spec"]["ports"][0]["port"] == 9100
    for obj in objects:
        assert obj["metadata"]["labels"]["cost-center"] == "42", obj["kind"]


def test_metrics_can_be_turned_off() -> None:
    objects = render("metrics.enabled=false", "metrics.serviceMonitor.enabled=true")
    assert "--metrics-port=0" in container(objects)["args"]
    assert {p["name"] for p in container(objects)["ports"]} == {"health"}
    assert not of_kind(objects, "Service") and not of_kind(objects, "ServiceMonitor")


def test_health_and_metrics_ports_must_differ() -> None:
    failed = template("health.port=8080", check=False)
    assert failed.returncode != 0 and "health.port and metrics.port must differ" in failed.stderr


# --- monitoring -------------------------------------------------------------------------------------------

def test_service_monitor_pod_monitor_and_dashboard_when_enabled() -> None:
    objects = render("metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom",
                     "metrics.mirrorPodMonitor.enabled=true", "dashboard.enabled=true",
                     "dashboard.namespace=monitoring", "dashboard.labels.grafana_dashboard=off",
                     "dashboard.annotations.grafana_folder=ML")
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= one(objects, "Service")["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["mn-system"]}
    pod_monitor = one(objects, "PodMonitor")
    assert pod_monitor["spec"]["namespaceSelector"] == {"any": True}
    assert pod_monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "multinode-mirror"
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    dashboard = one(objects, "ConfigMap")
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "ML"}
    (text,) = dashboard["data"].values()
    assert json.loads(text) == json.loads((CHART_DIR / "files" / "dashboard.json").read_text())


def test_mirror_pod_monitor_follows_watched_namespaces() -> None:
    objects = render("metrics.mirrorPodMonitor.enabled=true", "watchNamespaces={team-a}")
    assert one(objects, "PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


def test_mirror_pod_monitor_selects_the_mirror_pods_the_operator_renders() -> None:
    job = TrainingJob.model_validate({
        "metadata": {"name": "j", "namespace": "ml", "uid": "u"},
        "spec": {"numNodes": 2, "image": "train:1", "cache": {"claimName": "c", "mountPath": "/cache"},
                 "checkpointing": {"claimName": "k", "mountPath": "/ckpt"}}})
    pod = render_mirror_pod(job)
    monitor = one(render("metrics.mirrorPodMonitor.enabled=true"), "PodMonitor")["spec"]
    assert monitor["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}


# --- values schema ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("setting", "named"), [
    ("foo=bar", "'foo' not allowed"),
    ("image.foo=bar", "'foo' not allowed"),
    ("metrics.serviceMonitor.intervall=30s", "'intervall' not allowed"),
    ("operator.wokers=3", "'wokers' not allowed"),
    ("replicaCount=-1", "/replicaCount"),
    ("leaderElection.enabled=maybe", "/leaderElection/enabled"),
    ("leaderElection.leaseDurationSecond=15", "'leaseDurationSecond' not allowed"),
    ("extraEnv[0].name=POD_NAMESPACE", "/extraEnv/0/name"),
    ("logLevel=trace", "/logLevel"),
    ("operator.workers=0", "/operator/workers"),
    ("operator.apiTimeoutSeconds=0", "/operator/apiTimeoutSeconds"),
    ("operator.workers=many", "/operator/workers"),
    ("image.digest=latest", "/image/digest"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("watchNamespaces={team-*}", "/watchNamespaces/0"),
    ("securityContext.runAsUser=0", "/securityContext/runAsUser"),
    ("health.port=70000", "/health/port"),
    ("resources.requests.cpu=lots", "/resources/requests/cpu"),
    ("tolerations[0].operator=Maybe", "/tolerations/0/operator"),
    ("extraEnv[0].name=MULTINODE_WORKERS", "/extraEnv/0/name"),
    ("crds.keep=maybe", "/crds/keep"),
])
def test_schema_rejects_unknown_keys_and_bad_values(setting: str, named: str) -> None:
    result = template(setting, check=False)
    assert result.returncode != 0, f"--set {setting} was accepted"
    assert "don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr


def test_schema_forbids_unknown_keys_at_every_level() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())

    def objects_with_properties(node, path="$"):
        if isinstance(node, dict):
            if "properties" in node:
                yield path, node
            for key, value in node.items():
                yield from objects_with_properties(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from objects_with_properties(value, f"{path}[{i}]")

    found = list(objects_with_properties(schema))
    assert len(found) > 20
    for path, node in found:
        assert node.get("additionalProperties") is False, path


def test_schema_covers_every_value() -> None:
    """Every key of values.yaml is declared: the defaults pass the schema with additionalProperties false."""
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())

    def walk(v, s, path):
        if "$ref" in s:
            s = schema["definitions"][s["$ref"].split("/")[-1]]
        if isinstance(v, dict) and "properties" in s:
            assert set(v) <= set(s["properties"]), (path, set(v) - set(s["properties"]))
            for key, value in v.items():
                walk(value, s["properties"][key], f"{path}.{key}")

    walk(values, schema, "values")
    assert set(schema["properties"]) - {"global"} == set(values)


# --- the CRD ------------------------------------------------------------------------------------------------

def test_chart_crd_copy_is_the_generated_crd() -> None:
    generated = render_crd_yaml()
    assert (CHART_DIR / "files" / "crd.yaml").read_text() == generated, \
        "charts/multinode-operator/files/crd.yaml is stale: run `make crds`"
    assert (REPO / "crds" / "trainingjobs.multinode.dev.yaml").read_text() == generated, "run `make crds`"


def test_templated_crd_is_the_generated_one_plus_labels_and_keep_policy(default: list[dict]) -> None:
    crd = one(default, "CustomResourceDefinition")
    generated = render_crd()
    assert crd["spec"] == generated["spec"]
    assert crd["apiVersion"] == generated["apiVersion"]
    assert crd["metadata"]["name"] == generated["metadata"]["name"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_crd_keep_and_enabled_switches() -> None:
    crd = one(render("crds.keep=false"), "CustomResourceDefinition")
    assert "annotations" not in crd["metadata"]
    assert not of_kind(render("crds.enabled=false"), "CustomResourceDefinition")


def test_chart_has_no_crds_folder() -> None:
    """helm never upgrades crds/ content; the CRD is a template on purpose (see README.md)."""
    assert not (CHART_DIR / "crds").exists()


def test_every_namespaced_object_is_in_the_release_namespace(default: list[dict]) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding"}
    for obj in default:
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], obj["kind"]
        elif obj["metadata"]["name"] == NODE_LEASES_ROLE:  # the one exception: where the kubelets' Leases are
            assert obj["metadata"]["namespace"] == "kube-node-lease", obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == "mn-system", obj["kind"]


def test_the_operator_may_only_list_the_kubelets_leases() -> None:
    objects = render()
    (role,) = [r for r in of_kind(objects, "Role") if r["metadata"]["name"] == NODE_LEASES_ROLE]
    assert role["metadata"]["namespace"] == "kube-node-lease"
    assert rights(role["rules"]) == {("coordination.k8s.io", "leases", "list")}
    (binding,) = [b for b in of_kind(objects, "RoleBinding") if b["metadata"]["name"] == NODE_LEASES_ROLE]
    assert binding["roleRef"]["name"] == NODE_LEASES_ROLE and binding["subjects"][0]["namespace"] == "mn-system"


def test_readme_lists_every_value() -> None:
    readme = (CHART_DIR / "README.md").read_text()
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())

    opaque = {"resources.", "health.livenessProbe.", "health.readinessProbe."}  # documented as a whole

    def leaves(v, prefix=""):
        if isinstance(v, dict) and v and prefix not in opaque:
            for key, value in v.items():
                yield from leaves(value, f"{prefix}{key}.")
        else:
            yield prefix.rstrip(".")

    missing = [key for key in leaves(values) if f"`{key}`" not in readme]
    assert not missing, f"values missing from {Path('charts/multinode-operator/README.md')}: {missing}"


def test_template_and_lint_work_without_a_cluster_or_kube_version() -> None:
    # The pinned helm is linked with the pinned Kubernetes version as its default (helm's own Makefile
    # does the same); built plainly it assumes v1.20 and refuses the chart's kubeVersion >=1.30.
    rendered = helm("template", "mn", str(CHART_DIR)).stdout
    assert "kind: Deployment" in rendered
    assert "0 chart(s) failed" in helm("lint", "--strict", str(CHART_DIR)).stdout


def test_values_local_only_places_the_operator_on_a_real_node_and_leaves_the_image_to_the_admin() -> None:
    local = yaml.safe_load((CHART_DIR / "values-local.yaml").read_text())
    assert set(local) == {"nodeSelector", "tolerations", "resources"}  # nothing an admin's install would not have
    repository = "127.0.0.1:5000/multinode/operator"  # what `make push` prints, as the install sets it
    objects = render(f"image.repository={repository}", values=local)
    pod = of_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert container["image"] == f"{repository}:{chart['appVersion']}"
    assert container["imagePullPolicy"] == "IfNotPresent"  # pulled by the kubelet, from the registry
    assert pod["nodeSelector"] == {"localcluster.multinode.dev/real-node": "true"}
    assert pod["tolerations"][0]["key"] == "localcluster.multinode.dev/real-node"
