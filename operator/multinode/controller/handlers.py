"""kopf registrations. Handlers only index objects and mark jobs dirty; the Reconciler does the work.

No change-detecting handlers (on.create/update/resume) are registered on purpose: they make kopf store
progress and a diff-base in annotations, a PATCH per handler call. Watch events plus indices give us a
level-triggered controller that writes only what its plans say.

kopf watches and indexes the few objects (jobs, their Services and PodGroups); pods and nodes, of which
there are thousands, are watched by our own informers (watches.py): kopf's start-up wait for its indices
is quadratic in the objects listed (informer.py says why). The Reconciler's workers start once those
informers have listed, and kopf handles nothing before its own indices are filled, so after an operator
restart the first reconcile of a job already sees every pod that exists: nothing is created twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import kopf

from multinode.api import GROUP, LABEL_JOB_NAME, PLURAL, VERSION
from multinode.controller.kube import KubeApi
from multinode.controller.settings import OperatorSettings
from multinode.controller import watch_readiness
from multinode.controller.informer import Informer, wait_synced
from multinode.controller.watch_index import WatchIndex
from multinode.controller.watches import PodWatches, node_informer
from multinode.controller.worker import Indices, Reconciler
from multinode.metrics.operator import OperatorMetrics
from multinode.api.constants import (KUEUE_API_GROUP, KUEUE_API_VERSION, KUEUE_FLAVOR_PLURAL, KUEUE_WORKLOAD_PLURAL,
                                     POD_GROUP_API_GROUP, POD_GROUP_API_VERSION, POD_GROUP_PLURAL)
from multinode.reconcile.gang import observe_pod_group
from multinode.reconcile.kueue import observe_flavor, observe_workload

OWNED = {LABEL_JOB_NAME: kopf.PRESENT}


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff-base (a deep copy of the whole object) for every watch event, even with no
    change handler to use it. With only indices and event handlers registered nothing reads it, and a
    profile of a 128-pod start spent about a fifth of the operator's CPU in that copy (docs/benchmarks.md).
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return None

    def fetch(self, *, body: kopf.Body) -> Any:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        pass


logger = logging.getLogger("multinode.controller")

# How often to ask discovery, and how often to say we are still waiting.
DISCOVERY_POLL_SECONDS = 0.5
DISCOVERY_LOG_EVERY_SECONDS = 10.0


async def wait_until_jobs_served(kube: KubeApi) -> None:
    """Hold kopf's start (its watchers start after the startup handlers) until discovery serves
    TrainingJobs, so its one discovery scan finds them. Waits as long as it takes: a CRD applied later
    by a GitOps tool is fine; the log says what is missing meanwhile."""
    said = float("-inf")
    while not await kube.serves_jobs():
        if time.monotonic() - said >= DISCOVERY_LOG_EVERY_SECONDS:
            logger.warning("the apiserver does not serve %s.%s/%s yet; waiting (is the CRD installed?)",
                           PLURAL, GROUP, VERSION)
            said = time.monotonic()
        await asyncio.sleep(DISCOVERY_POLL_SECONDS)


def configure_kopf(settings: kopf.OperatorSettings, config: OperatorSettings) -> None:
    # Events only for warnings: phase changes are posted by the Reconciler, once each.
    settings.posting.level = logging.WARNING
    # No change handlers, so no diff-base: skip building one per event (see NoDiffBase).
    settings.persistence.diffbase_storage = NoDiffBase()
    # Long watches, with a client-side timeout a little longer, so a stalled stream is noticed.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    # kopf's requests are its watches (our writes go through KubeApi). A watch retrying a failing first
    # LIST holds back every event of the operator (controller/watch_readiness.py): give up after ~7 s, not
    # kopf's ~54 s, and let watch_readiness retry it without holding anything back.
    settings.networking.error_backoffs = (1, 1, 2, 3)
    # We name every resource we watch, so scanning API groups is needed only to follow namespace
    # patterns (globs like "team-*"), which also needs list/watch on namespaces.
    settings.scanning.disabled = not any(set(ns) & set("*?![") for ns in config.namespaces)


# kopf types each kind of handler as a protocol naming every keyword it may pass, for any resource
# (namespace: str | None). The handlers below name only what they use, take a namespaced object's namespace
# as str, and the startup handler takes the indices kopf passes it: all correct, none matching the protocol
# to the letter, hence the `type: ignore[arg-type]` on their decorators.
def build_registry(config: OperatorSettings, metrics: OperatorMetrics | None = None) -> kopf.OperatorRegistry:
    # No watch may hold back every event for ever (see controller/watch_readiness.py).
    watch_readiness.install()
    registry = kopf.OperatorRegistry()
    holder: dict[str, Reconciler] = {}
    watches: list[Informer | PodWatches] = []

    def reconciler() -> Reconciler:
        return holder["reconciler"]

    # kopf hands its indices to startup handlers too (empty, filled by each watch's initial LIST before
    # any event handler runs): the Reconciler is built with them.
    @kopf.on.startup(registry=registry)  # type: ignore[arg-type]  # kopf's protocol: see build_registry
    async def configure(settings: kopf.OperatorSettings, job_index: kopf.Index, service_index: kopf.Index,
                        pod_group_index: kopf.Index, workload_index: kopf.Index, flavor_index: kopf.Index,
                        **_: Any) -> None:
        configure_kopf(settings, config)
        own_metrics = metrics or OperatorMetrics()
        kube = KubeApi.connect(config.api_concurrency, timeout=config.api_timeout_seconds,
                               on_error=lambda op, code: own_metrics.api_errors.labels(operation=op, code=code).inc())
        await wait_until_jobs_served(kube)
        # Asked once, now: kopf resolves the resources it watches (PodGroups among them) right after the
        # startup handlers, so both see the same apiserver. An API enabled later needs an operator restart.
        gang_api = await kube.serves_pod_groups()
        logger.info("native gang scheduling (%s/%s PodGroups): %s", POD_GROUP_API_GROUP, POD_GROUP_API_VERSION,
                    "served" if gang_api else "not served; partial gangs are released after a timeout")
        kueue_api = await kube.serves_kueue()
        logger.info("Kueue (%s/%s Workloads): %s", KUEUE_API_GROUP, KUEUE_API_VERSION,
                    "served; jobs with the label kueue.x-k8s.io/queue-name run when Kueue admits them" if kueue_api
                    else "not served; jobs with a queue name say KueueNotInstalled")
        pods, nodes = WatchIndex(), WatchIndex()
        indices = Indices(jobs=job_index, pods=pods, services=service_index, nodes=nodes,
                          pod_groups=pod_group_index, workloads=workload_index, flavors=flavor_index)
        r = holder["reconciler"] = Reconciler(kube, config, indices, own_metrics, gang_api=gang_api,
                                              kueue_api=kueue_api)
        own_metrics.watch_state(lambda: dict(r.phases), lambda: len(r.queue), lambda: list(r.figures.values()))
        pod_watches = PodWatches(kube, config.namespaces, pods, r)
        r.pods_listed = pod_watches.ready
        node_watch = node_informer(kube, nodes, r)
        watches.extend([pod_watches, node_watch])
        for watch in watches:
            watch.start()

        async def listed() -> None:
            await asyncio.gather(pod_watches.wait_started(), wait_synced([node_watch]))
        r.start(after=listed)

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # The same identity as our own client: in-cluster service account, else the kubeconfig.
        return kopf.login_via_client(**kwargs)

    @kopf.on.cleanup(registry=registry)
    async def shutdown(**_: Any) -> None:
        for watch in watches:
            watch.stop()
        if "reconciler" in holder:
            await holder["reconciler"].stop()

    @kopf.index(GROUP, VERSION, PLURAL, id="job_index", registry=registry)  # type: ignore[arg-type]  # kopf's protocol: see build_registry
    async def job_index(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict:
        return {(namespace, name): dict(body)}

    # The native PodGroups the operator made (one per attempt). Where the apiserver does not serve them, kopf
    # logs that it cannot watch them and goes on; nothing waits for this index then.
    @kopf.index(POD_GROUP_API_GROUP, POD_GROUP_API_VERSION, POD_GROUP_PLURAL, labels=OWNED,  # type: ignore[arg-type]  # kopf's protocol: see build_registry
                id="pod_group_index", registry=registry)
    async def pod_group_index(namespace: str, body: kopf.Body, **_: Any) -> dict:
        observed = observe_pod_group(body)
        return {} if observed is None else {(namespace, observed.job_name): observed}

    @kopf.on.event(POD_GROUP_API_GROUP, POD_GROUP_API_VERSION, POD_GROUP_PLURAL, labels=OWNED,  # type: ignore[arg-type]  # kopf's protocol: see build_registry
                   registry=registry)
    async def pod_group_event(namespace: str, labels: kopf.Labels, **_: Any) -> None:
        reconciler().queue.add((namespace, labels[LABEL_JOB_NAME]))

    # Kueue: the Workloads the operator made (one per queued job), and every ResourceFlavor's nodeLabels (the
    # admitted flavors' labels select the pods' nodes). Not served without Kueue: kopf logs it and goes on.
    @kopf.index(KUEUE_API_GROUP, KUEUE_API_VERSION, KUEUE_WORKLOAD_PLURAL, labels=OWNED,  # type: ignore[arg-type]  # kopf's protocol: see build_registry
                id="workload_index", registry=registry)
    async def workload_index(namespace: str, body: kopf.Body, **_: Any) -> dict:
        observed = observe_workload(body)
        return {} if observed is None else {(namespace, observed.job_name): observed}

    @kopf.on.event(KUEUE_API_GROUP, KUEUE_API_VERSION, KUEUE_WORKLOAD_PLURAL, labels=OWNED,  # type: ignore[arg-type]  # kopf's protocol: see build_registry
                   registry=registry)
    async def workload_event(namespace: str, labels: kopf.Labels, **_: Any) -> None:
        reconciler().queue.add((namespace, labels[LABEL_JOB_NAME]))

    @kopf.index(KUEUE_API_GROUP, KUEUE_API_VERSION, KUEUE_FLAVOR_PLURAL, id="flavor_index", registry=registry)
    async def flavor_index(name: str, body: kopf.Body, **_: Any) -> dict:
        return {name: observe_flavor(body)}

    @kopf.index("", "v1", "services", labels=OWNED, id="service_index", registry=registry)  # type: ignore[arg-type]  # kopf's protocol: see build_registry
    async def service_index(namespace: str, labels: kopf.Labels, name: str, **_: Any) -> dict:
        return {(namespace, labels[LABEL_JOB_NAME]): name}

    # Handlers are coroutines: they run on the event loop, where the queue lives (sync ones run in threads).
    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)  # type: ignore[arg-type]  # kopf's protocol: see build_registry
    async def job_event(namespace: str, name: str, type: str | None, uid: str, **_: Any) -> None:
        r = reconciler()
        if type == "DELETED":
            r.forget((namespace, name), uid)
        else:
            r.queue.add((namespace, name))

    @kopf.on.event("", "v1", "services", labels=OWNED, registry=registry)  # type: ignore[arg-type]  # kopf's protocol: see build_registry
    async def service_event(namespace: str, labels: kopf.Labels, **_: Any) -> None:
        reconciler().queue.add((namespace, labels[LABEL_JOB_NAME]))

    return registry
