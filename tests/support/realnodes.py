"""Pods on the local cluster's real nodes: builders, and waits on what a kubelet really reports."""

from __future__ import annotations

import os
import re
import shutil
import uuid

from kubernetes import client
from multinode import __version__
from multinode.api import LABEL_JOB_NAME
from multinode.api.constants import ANNOTATION_ATTEMPT, ANNOTATION_NODE_INDEX
from localcluster import ClusterConfig, LocalCluster, NodePoolConfig, publish
from localcluster.images import OPERATOR, TRAINER
from localcluster.netplan import REAL_NODE_LABEL, REAL_NODE_TOLERATION

from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from tests.support.paths import CHART_DIR
from tests.support.chart import helm

# A job's node pods never share a node (one pod per node), so a test that loses or excludes a node runs a job
# one node smaller than the cluster: it restarts on exactly the nodes left. Four, not three: the collective
# bandwidth test's blame rule needs a ring of three pods to tell the slow one from its neighbours, and the job
# must still fit once the slow pod's node is excluded (test_collective_bandwidth.py).
REAL_NODES = 4
# The size of such a job: every real node but one.
ALL_BUT_ONE = REAL_NODES - 1
# The session's real-node cluster (one per test session, one per host at a time).
REAL_CLUSTER_NAME = f"pytest-real-{os.getpid()}"
# The helm release of the operator on it.
RELEASE = "mn"


def real_node_name(index: int) -> str:
    return f"real-node-{index}"


def real_node_names() -> set[str]:
    """Every real node of the session's cluster."""
    return {real_node_name(i) for i in range(REAL_NODES)}


class RealClusterSlot:
    """The session's real-node cluster, started on first use. Real nodes share the host's network
    namespace, so only one such cluster runs at a time: a test that needs the host to itself releases it,
    and the next test that asks for it starts it again."""

    def __init__(self) -> None:
        self._cluster: LocalCluster | None = None
        # One release namespace per slot: the chart's CRD outlives `helm uninstall` (its keep policy), and only
        # a release of the same name in the same namespace adopts it again (test_flux.py installs its own).
        self._release_namespace = f"mn-system-{uuid.uuid4().hex[:6]}"
        self._installed = False

    def get(self) -> LocalCluster:
        if self._cluster is None:
            if os.geteuid() != 0:
                raise AssertionError("real nodes need root (kubelet, containerd, addresses on lo)")
            # Stock node timings (40 s grace, 300 s default tolerations): the real-node lane is where a node
            # really dies (test_node_loss.py), so it runs what users' clusters run.
            cluster = LocalCluster(ClusterConfig(name=REAL_CLUSTER_NAME, die_with_parent=True,
                                                 nodes=NodePoolConfig(count=2), real_nodes=REAL_NODES,
                                                 timings="stock"))
            cluster.start()
            # What `make push` does: the operator and trainer images and the chart into the cluster's registry.
            publish.push_for_local_cluster(cluster.registry)
            self._cluster = cluster
        return self._cluster

    def operator(self) -> tuple[LocalCluster, str]:
        """The cluster with the operator installed by helm from the registry's OCI chart, with the image
        repository and values-local.yaml, as docs/development.md tells a user to (once per cluster); returns
        it and the release's namespace."""
        cluster = self.get()
        if not self._installed:
            helm("install", RELEASE, *registry_chart(cluster), "-n", self._release_namespace, "--create-namespace",
                 "--set", f"image.repository={publish.image_repository(cluster.registry, OPERATOR)}",
                 "-f", str(CHART_DIR / "values-local.yaml"), "--wait", "--timeout", "180s",
                 "--kubeconfig", str(cluster.kubeconfig), timeout=240)
            self._installed = True
            # Ready is not leading: a release installed again (after test_flux.py's) finds the Lease its
            # predecessor left, and a test that looks for the leader at once must find one.
            core = client.CoreV1Api(cluster.api_client())
            wait_for(lambda: leading_operator(core, self._release_namespace), timeout=120,
                     what="a live operator replica holding the Lease")
        return cluster, self._release_namespace

    def without_operator(self) -> tuple[LocalCluster, str]:
        """The cluster with the operator of operator() uninstalled (when it was), for a test that installs it
        its own way as release RELEASE in the namespace returned (no two operators handle one job); the next
        operator() installs it again."""
        cluster = self.get()
        if self._installed:
            helm("uninstall", RELEASE, "-n", self._release_namespace, "--wait", "--timeout", "120s",
                 "--kubeconfig", str(cluster.kubeconfig), timeout=180)
            self._installed = False
        return cluster, self._release_namespace

    def release(self) -> None:
        self._installed = False
        if self._cluster is not None:
            cluster, self._cluster = self._cluster, None
            cluster.stop()
            shutil.rmtree(cluster.dir, ignore_errors=True)


def registry_chart(cluster: LocalCluster) -> list[str]:
    """The chart of `helm install|upgrade <release> ...` as an admin gives it after `make push`: the OCI chart
    in the cluster's registry, by version. The install also sets image.repository (its tag is appVersion)."""
    return [publish.chart_reference(f"{cluster.registry}/{publish.CHARTS_PATH}"), "--version", __version__]


def session_image(name: str) -> str:
    """<registry>/multinode/<name>:<version> in the session's real-node cluster's registry (pushed at its start)."""
    return publish.image_reference(LocalCluster(ClusterConfig(name=REAL_CLUSTER_NAME)).registry, name)


def trainer_image() -> str:
    return session_image(TRAINER)


def real_pod(name: str, node: int, script: str, *, image: str | None = None, restart: str = "Never",
             hostname: str | None = None, subdomain: str | None = None, labels: dict | None = None,
             gpus: int = 0) -> dict:
    """A pod pinned to real node `node` that runs `script` with python3 (the trainer image by default)."""
    container: dict = {"name": "main", "image": image or trainer_image(),
                       "command": ["python3", "-u", "-c", script],
                       "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}}
    if gpus:
        container["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    spec: dict = {"restartPolicy": restart, "containers": [container], "terminationGracePeriodSeconds": 1,
                  "nodeSelector": {REAL_NODE_LABEL: "true", "kubernetes.io/hostname": real_node_name(node)},
                  "tolerations": [REAL_NODE_TOLERATION]}
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def wait_pod_done(core: client.CoreV1Api, namespace: str, name: str, timeout: float = 120) -> client.V1Pod:
    """Until the pod Succeeded or Failed; returns it."""
    return wait_for(lambda: _finished(core, namespace, name), timeout=timeout, what=f"pod {namespace}/{name} to finish")


def _finished(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    pod = core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase in ("Succeeded", "Failed") else None


def wait_pod_running(core: client.CoreV1Api, namespace: str, name: str, timeout: float = 120) -> client.V1Pod:
    return wait_for(lambda: _running(core, namespace, name), timeout=timeout, what=f"pod {namespace}/{name} Running")


def _running(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    pod = core.read_namespaced_pod(name, namespace)
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    return pod if pod.status.phase == "Running" and ready else None


def clients(cluster: LocalCluster) -> tuple[client.CoreV1Api, client.CustomObjectsApi]:
    api = cluster.api_client()
    return client.CoreV1Api(api), client.CustomObjectsApi(api)


def pod_log(core: client.CoreV1Api, namespace: str, name: str) -> str:
    return core.read_namespaced_pod_log(name, namespace)


def follow_log(core: client.CoreV1Api, namespace: str, pod: str, container: str) -> str:
    """A container's log, followed until the container ends (the stream closes then, the pod deleted or not)."""
    response = core.read_namespaced_pod_log(pod, namespace, container=container, follow=True,
                                            _preload_content=False, _request_timeout=180)
    try:
        return response.data.decode(errors="replace")
    finally:
        response.release_conn()


def attempt_logs(core: client.CoreV1Api, namespace: str, job: str, attempt: int) -> dict[int, str]:
    """The logs of job `job`'s pods that run `attempt` and whose trainer has started, by node index: the pods
    made for it, or (restartStrategy InPlace) the pods whose annotation names it, restarted into it."""
    logs = {}
    for pod in core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={job}").items:
        match = re.fullmatch(rf"{job}-(\d+)-a(\d+)", pod.metadata.name)
        annotations = pod.metadata.annotations or {}
        told = annotations.get(ANNOTATION_ATTEMPT)
        runs = int(told) if told is not None else int(match.group(2)) if match else None
        # A hot spare that took a rank (spec.spareNodes): its index is in its annotation.
        index = int(match.group(1)) if match else int(annotations.get(ANNOTATION_NODE_INDEX, "-1"))
        if index >= 0 and runs == attempt and pod.status.phase in ("Running", "Succeeded", "Failed"):
            try:
                logs[index] = pod_log(core, namespace, pod.metadata.name)
            except client.ApiException:
                pass  # the container has not started yet
    return logs


# The chart's release in the real-node tests is named "mn": its operator pods and its leader Lease.
OPERATOR_SELECTOR = "app.kubernetes.io/name=multinode-operator"
OPERATOR_LEASE = "mn-multinode-operator"


def leading_operator(core: client.CoreV1Api, namespace: str) -> client.V1Pod | None:
    """The operator replica that holds the Lease (the chart runs two), or None while none of the live ones does."""
    pods = [p for p in core.list_namespaced_pod(namespace, label_selector=OPERATOR_SELECTOR).items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease(OPERATOR_LEASE, namespace)
    holder = lease.spec.holder_identity or ""
    leaders = [p for p in pods if holder.startswith(p.metadata.name + "_")]
    return leaders[0] if len(leaders) == 1 else None


def node_away_from_leader(core: client.CoreV1Api, namespace: str) -> int:
    """The index of a real node that does not host the leading operator replica (the chart runs two, one per
    real node): a test may change that node's devices or links while the leader goes on undisturbed."""
    leader = wait_for(lambda: leading_operator(core, namespace), timeout=60, what="a leading operator replica")
    return next(i for i in range(REAL_NODES) if real_node_name(i) != leader.spec.node_name)


def wait_operator_env(core: client.CoreV1Api, namespace: str, name: str, value: str,
                      timeout: float = 180) -> client.V1Pod:
    """After a `helm upgrade`: wait until no operator pod with another `name` is left (not even one
    terminating) and a new one leads. `helm --wait` returns once the new pods are Ready, while an old leader
    may still act for its grace period: a job created then would be reconciled with the old settings."""
    def rolled_out() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(namespace, label_selector=OPERATOR_SELECTOR).items
        env = [{e.name: e.value for e in p.spec.containers[0].env or []}.get(name) for p in pods]
        return leading_operator(core, namespace) if pods and all(v == value for v in env) else None

    return wait_for(rolled_out, timeout=timeout, what=f"every operator pod with {name}={value}, one leading")


# `python3 -c script` is its container's PID 1 without a SIGTERM handler: it ignores SIGTERM, and each of its
# pods deleted (a gang restart, the job's end) would take the whole 30 s default grace period. These scripts
# save nothing on SIGTERM, so they say so as a user would (docs/user-guide.md, "Stopping a trainer").
REAL_JOB_GRACE_SECONDS = 3


def real_job(name: str, num_nodes: int, script: str, *, gpus: int = 1, image: str | None = None,
             pod_template: dict | None = None, **spec) -> dict:
    """A TrainingJob for real nodes whose trainers run `script` with python3 (no torch needed), in the trainer
    image from the registry by default; `pod_template` adds to its podTemplate."""
    return training_job(name, num_nodes, gpus=gpus, image=image or trainer_image(),
                        command=["python3", "-u", "-c", script],
                        resourcesPerNode={"gpus": gpus, "cpu": "50m", "memory": "64Mi"},
                        podTemplate={"nodeSelector": {REAL_NODE_LABEL: "true"}, "tolerations": [REAL_NODE_TOLERATION],
                                     "terminationGracePeriodSeconds": REAL_JOB_GRACE_SECONDS, **(pod_template or {})},
                        **spec)
