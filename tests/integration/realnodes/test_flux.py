"""GitOps with a real Flux (source-, kustomize- and helm-controller built from the Go module proxy), on real
nodes: a git repository on loopback holds the operator's chart (a HelmRelease of the OCI chart in the
cluster's registry) and TrainingJobs; Flux applies them, reads the jobs' health with kstatus, applies a
change of a mutable field, prunes a job removed from git with its pods and objects, and upgrades the
operator when the chart's version is bumped in git. docs/gitops.md shows the same repository."""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from localcluster import LocalCluster, publish
from localcluster.harness.flux import KINDS as FLUX_KINDS, FluxControllers
from localcluster.harness.gitserver import GitServer, WorkTree
from localcluster.harness.kube import allow_host_path, kubectl, new_namespace
from localcluster.harness.waiting import wait_for
from localcluster.images import OPERATOR

from localcluster.harness import realexample
from multinode import __version__
from multinode.api import LABEL_JOB_NAME
from tests.support import jobs
from tests.support.chart import helm
from tests.support.paths import CHART_DIR
from tests.support.realnodes import RELEASE, RealClusterSlot

# The chart as pushed by `make push` (__version__), and the same chart as a next version, pushed here: the
# upgrade Flux applies when git names it.
NEXT_VERSION = f"{__version__}-next.1"


def _next_chart(registry: str, work: Path) -> None:
    """Package the chart as NEXT_VERSION (same appVersion, so the same operator image) and push it."""
    package = work / "next"
    helm("package", str(CHART_DIR), "--version", NEXT_VERSION, "--app-version", __version__, "--destination",
         str(package))
    publish.push_chart(package / f"multinode-operator-{NEXT_VERSION}.tgz", f"{registry}/{publish.CHARTS_PATH}")


def _dump(*objects: dict) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


def infrastructure(registry: str, release_namespace: str, chart_version: str) -> str:
    """infrastructure/operator.yaml: the chart from the registry and its release, as an admin writes them."""
    values = yaml.safe_load((CHART_DIR / "values-local.yaml").read_text())
    values["image"] = {"repository": publish.image_repository(registry, OPERATOR)}
    source = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
              "metadata": {"name": "multinode-operator"},
              "spec": {"interval": "10m", "url": publish.chart_reference(f"{registry}/{publish.CHARTS_PATH}"),
                       "ref": {"tag": chart_version}, "insecure": True,  # the local registry is plain HTTP
                       "layerSelector": {"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                                         "operation": "copy"}}}
    release = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
               "metadata": {"name": "multinode-operator"},
               "spec": {"interval": "10m", "releaseName": RELEASE, "targetNamespace": release_namespace,
                        "storageNamespace": release_namespace, "install": {"createNamespace": True},
                        "chartRef": {"kind": "OCIRepository", "name": "multinode-operator"}, "values": values}}
    return _dump(source, release)


def training(registry: str) -> dict:
    """The real example, small: 2 nodes, 4 steps, no checkpoints."""
    job = yaml.safe_load(realexample.manifest_text("trainingjob.yaml", registry))
    for field in ("cache", "checkpointing", "hangDetection"):
        job["spec"].pop(field)
    realexample.set_env(job, TRAIN_STEPS="4", STEP_SECONDS="0", CHECKPOINT_EVERY="0")
    job["metadata"]["name"] = "train"
    return job


def broken(registry: str) -> dict:
    """A job whose trainer exits 3 at once, with no restarts: it fails."""
    job = training(registry)
    job["metadata"]["name"] = "broken"
    job["spec"].update(numNodes=1, command=["python3", "-c", "raise SystemExit(3)"], failurePolicy={"maxRestarts": 0})
    return job


def flux_objects(flux_ns: str, jobs_ns: str, url: str) -> str:
    """What `flux bootstrap` would commit under clusters/<name>/; applied here by the test."""
    source = {"kind": "GitRepository", "name": "fleet"}
    return _dump(
        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
         "metadata": {"name": "fleet", "namespace": flux_ns},
         "spec": {"interval": "1m", "url": url, "ref": {"branch": "main"}}},
        {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
         "metadata": {"name": "infrastructure", "namespace": flux_ns},
         "spec": {"interval": "10m", "path": "./infrastructure", "prune": True, "wait": True, "timeout": "4m",
                  "targetNamespace": flux_ns, "sourceRef": source}},
        {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
         "metadata": {"name": "training-jobs", "namespace": flux_ns},
         "spec": {"interval": "10m", "path": "./jobs", "prune": True, "wait": True, "timeout": "5m",
                  "dependsOn": [{"name": "infrastructure"}], "targetNamespace": jobs_ns, "sourceRef": source}})


@pytest.fixture
def flux_cluster(real_slot: RealClusterSlot) -> Iterator[tuple[LocalCluster, str]]:
    """The real-node cluster without the session's operator (Flux installs its own, as the same release)."""
    cluster, release_namespace = real_slot.without_operator()
    yield cluster, release_namespace


def chart_version(deployment: client.V1Deployment) -> str:
    """The chart version of the release that made `deployment` (its helm.sh/chart label, less Flux's digest)."""
    return deployment.metadata.labels["helm.sh/chart"].removeprefix("multinode-operator-").split("_")[0]


def _ready(custom: client.CustomObjectsApi, group: str, version: str, plural: str, ns: str, name: str) -> dict:
    obj = custom.get_namespaced_custom_object(group, version, ns, plural, name)
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})


def test_flux_installs_the_chart_and_runs_upgrades_and_prunes_jobs_from_git(
        flux_cluster: tuple[LocalCluster, str]) -> None:
    cluster, release_namespace = flux_cluster
    kubeconfig = str(cluster.kubeconfig)
    api = cluster.api_client()
    core, custom, apps = client.CoreV1Api(api), client.CustomObjectsApi(api), client.AppsV1Api(api)
    work = Path(tempfile.mkdtemp(prefix="flux-"))
    flux_ns, jobs_ns = new_namespace(core, prefix="flux"), new_namespace(core, prefix="realgitops")
    allow_host_path(core, jobs_ns)  # the example mounts torch from the host
    _next_chart(cluster.registry, work)
    repo = WorkTree(work / "git", "fleet.git")
    repo.write("infrastructure/operator.yaml", infrastructure(cluster.registry, release_namespace, __version__))
    repo.write("jobs/train.yaml", _dump(training(cluster.registry)))
    repo.write("jobs/broken.yaml", _dump(broken(cluster.registry)))
    repo.commit("the operator and two jobs")

    def kustomization(name: str) -> dict:
        return _ready(custom, "kustomize.toolkit.fluxcd.io", "v1", "kustomizations", flux_ns, name)

    def wait_kustomization(name: str, ready: str, words: str, what: str) -> dict:
        """The Ready condition of Kustomization `name` once its status is `ready` and its message has `words`;
        on a timeout, the last condition and kustomize-controller's log say why."""
        try:
            return wait_for(lambda: (c := kustomization(name)).get("status") == ready
                            and words in c.get("message", "") and c, timeout=120, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\nReady: {kustomization(name)}\n{flux.log_tail('kustomize-controller')}") from e

    def fetch() -> None:  # what `flux reconcile source git fleet` does
        now = datetime.now(timezone.utc).isoformat()
        custom.patch_namespaced_custom_object("source.toolkit.fluxcd.io", "v1", flux_ns, "gitrepositories", "fleet",
                                              {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": now}}})

    with GitServer(work / "git") as git, FluxControllers(kubeconfig, work / "flux", flux_ns) as flux:
        try:
            kubectl(kubeconfig, "apply", "-f", "-", input=flux_objects(flux_ns, jobs_ns, git.url("fleet.git")))

            # 1. The chart from the registry, installed by helm-controller: the operator runs.
            wait_for(lambda: kustomization("infrastructure").get("status") == "True", timeout=240,
                     what=f"the infrastructure Kustomization Ready\n{flux.log_tail('helm-controller')}")
            deployment = apps.list_namespaced_deployment(release_namespace).items
            # helm-controller gives a chart from an OCIRepository the version <version>+<digest> (the label: `_`).
            assert [chart_version(d) for d in deployment] == [__version__]

            # 2. The jobs applied; one trains and succeeds, the other fails, and Flux says so (kstatus Failed).
            wait_for(lambda: not any(jobs.job_gone(custom, jobs_ns, name) for name in ("train", "broken")),
                     timeout=120, what=f"the jobs applied\n{flux.log_tail('kustomize-controller')}")
            jobs.wait_phase(custom, jobs_ns, "train", "Succeeded", timeout=240)
            jobs.wait_phase(custom, jobs_ns, "broken", "Failed", timeout=120)
            unhealthy = wait_kustomization("training-jobs", "False", "broken", "the failed job reported")
            assert unhealthy["reason"] == "HealthCheckFailed", unhealthy
            assert f"TrainingJob/{jobs_ns}/broken" in unhealthy["message"], unhealthy  # the succeeded one is healthy
            assert f"TrainingJob/{jobs_ns}/train" not in unhealthy["message"], unhealthy

            # 3. A mutable field changed in git, and the failed job removed: applied, pruned, healthy.
            train = training(cluster.registry)
            train["spec"]["failurePolicy"] = {"maxRestarts": 2}
            repo.write("jobs/train.yaml", _dump(train))
            repo.remove("jobs/broken.yaml")
            repo.commit("maxRestarts 2; the broken job goes")
            fetch()
            wait_for(lambda: jobs.job_gone(custom, jobs_ns, "broken"), timeout=120, what="the broken job pruned")
            changed = wait_for(lambda: (j := jobs.get_job(custom, jobs_ns, "train"))["metadata"]["generation"] == 2
                               and j["status"].get("observedGeneration") == 2 and j, timeout=60,
                               what="the change applied and observed")
            assert changed["spec"]["failurePolicy"]["maxRestarts"] == 2 and changed["status"]["phase"] == "Succeeded"
            wait_kustomization("training-jobs", "True", "", "the Kustomization Ready once the failed job is gone")

            # An immutable field changed in git: refused at admission, and Flux says why, field by field; put
            # back, the Kustomization is Ready again.
            resized = copy.deepcopy(train)
            resized["spec"]["numNodes"] = 3
            repo.write("jobs/train.yaml", _dump(resized))
            repo.commit("numNodes 3")
            fetch()
            refused = wait_kustomization("training-jobs", "False", "immutable", "the refusal reported")
            assert "spec.numNodes is immutable" in refused["message"], refused
            repo.write("jobs/train.yaml", _dump(train))
            repo.commit("numNodes 2 again")
            fetch()
            wait_kustomization("training-jobs", "True", "", "the jobs' Kustomization Ready again")
            assert jobs.get_job(custom, jobs_ns, "train")["spec"]["numNodes"] == 2

            # 4. The last job removed from git: pruned with its pods and every object it owned.
            repo.remove("jobs/train.yaml")
            repo.write("jobs/.keep", "")
            repo.commit("no more jobs")
            fetch()
            wait_for(lambda: jobs.job_gone(custom, jobs_ns, "train"), timeout=120, what="the train job pruned")
            selector = LABEL_JOB_NAME  # any value: every object a job made carries it
            wait_for(lambda: not core.list_namespaced_pod(jobs_ns, label_selector=selector).items
                     and not core.list_namespaced_service(jobs_ns, label_selector=selector).items
                     and not core.list_namespaced_config_map(jobs_ns, label_selector=selector).items,
                     timeout=120, what="the pruned jobs' pods, Services and ConfigMaps gone")

            # 5. The chart's version bumped in git: helm-controller upgrades the release.
            bumped = infrastructure(cluster.registry, release_namespace, NEXT_VERSION)
            repo.write("infrastructure/operator.yaml", bumped)
            repo.commit(f"operator chart {NEXT_VERSION}")
            fetch()

            def upgraded() -> bool:
                release = custom.get_namespaced_custom_object("helm.toolkit.fluxcd.io", "v2", flux_ns, "helmreleases",
                                                              "multinode-operator")
                history = (release.get("status") or {}).get("history") or [{}]
                return (history[0].get("chartVersion", "").split("+")[0] == NEXT_VERSION
                        and history[0].get("status") == "deployed")
            wait_for(upgraded, timeout=240, what=f"the release upgraded to {NEXT_VERSION}\n"
                                                 f"{flux.log_tail('helm-controller')}")
            [deployment] = apps.list_namespaced_deployment(release_namespace).items
            assert chart_version(deployment) == NEXT_VERSION
            kubectl(kubeconfig, "rollout", "status", "-n", release_namespace, f"deployment/{deployment.metadata.name}",
                    "--timeout=120s")
        finally:
            # Flux's objects carry finalizers its controllers remove: delete them while the controllers run.
            # Deleting the infrastructure Kustomization prunes the HelmRelease, which uninstalls the release.
            kubectl(kubeconfig, "delete", FLUX_KINDS[0], "--all", "-n", flux_ns,
                    "--wait=true", "--timeout=180s", check=False)
            kubectl(kubeconfig, "delete", ",".join(FLUX_KINDS), "--all", "-n", flux_ns, "--wait=true",
                    "--timeout=120s", check=False)
    core.delete_namespace(flux_ns)
    core.delete_namespace(jobs_ns)
    shutil.rmtree(work, ignore_errors=True)
    # The release is gone with the HelmRelease (the next test that needs the operator installs it again).
    assert not helm("list", "-n", release_namespace, "-q", "--kubeconfig", kubeconfig).stdout.strip()
