"""kopf registrations: start-up, log-in and shut-down of the operator. The Reconciler does the work.

kopf runs the operator (its event loop, signals, liveness probe, credentials), and watches nothing itself:
every object the operator reads, the TrainingJobs included, comes from our own informers (watches.py),
one LIST+WATCH per kind per followed namespace. Why, in short (docs/architecture.md, "Watches"):

- kopf processes no event at all until every index-feeding watch of every namespace it follows has
  listed: one watch that could not list (a refused namespace, a CRD replaced under it, a failing
  conversion webhook) held back every job of the operator;
- under a namespace glob, kopf follows a namespace only from a watch *event*: the namespaces its watcher
  LISTs are dropped (kopf 1.45, observation.py), so one created between kopf's first listing and its
  watcher's, as at every operator start, was never watched, and its jobs never reconciled
  (tests/integration/controller/test_job_storm.py caught it).

Our informers follow namespaces from their own LIST, answer for one namespace each, and the Reconciler
plans a job once its namespace's informers have listed (NamespacedWatches.ready): after an operator
restart the first reconcile of a job already sees every pod that exists, so nothing is created twice. An
event that never arrives anyway is caught by the periodic re-list (resync.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import kopf

from multinode.api import GROUP, LABEL_JOB_NAME, LABEL_MIRROR_OF, PLURAL, VERSION
from multinode.controller.enqueue import Enqueue
from multinode.controller.informer import Informer, wait_synced
from multinode.controller.kube import KubeApi
from multinode.controller.reconciler import Reconciler
from multinode.controller.resync import JobResync
from multinode.controller.settings import OperatorSettings
from multinode.controller.stores import Stores
from multinode.controller.watches import (NamespacedKind, NamespacedWatches, job_event, named_informer,
                                          node_informer, owner_event, pod_event, requeue_all)
from multinode.integrations.registry import INTEGRATIONS
from multinode.metrics.operator import OperatorMetrics
from multinode.reconcile.integration import Integration, Seen


logger = logging.getLogger("multinode.controller")

# How often to ask discovery, and how often to say we are still waiting.
DISCOVERY_POLL_SECONDS = 0.5
DISCOVERY_LOG_EVERY_SECONDS = 10.0


async def wait_until_jobs_served(kube: KubeApi) -> None:
    """Hold the start until discovery serves TrainingJobs: the job informers would find their collection not
    served and ask again only every NOT_SERVED_RETRY_SECONDS. Waits as long as it takes: a CRD applied
    later by a GitOps tool is fine; the log says what is missing meanwhile."""
    said = float("-inf")
    while not await kube.serves_jobs():
        if time.monotonic() - said >= DISCOVERY_LOG_EVERY_SECONDS:
            logger.warning("the apiserver does not serve %s.%s/%s yet; waiting (is the CRD installed?)",
                           PLURAL, GROUP, VERSION)
            said = time.monotonic()
        await asyncio.sleep(DISCOVERY_POLL_SECONDS)


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    # Events only for warnings (kopf's own); phase changes are posted by the Reconciler, once each.
    settings.posting.level = logging.WARNING
    # kopf watches nothing (our informers do): it need not scan API groups, nor watch CRDs and namespaces.
    settings.scanning.disabled = True


def namespaced_kinds(r: Enqueue, stores: Stores, served: Iterable[Seen] = ()) -> list[NamespacedKind]:
    """What the operator watches in each namespace it follows: the TrainingJobs; their pods and Services, and
    the objects of each integration whose API is served (each carrying its job's label)."""
    pods, owned = pod_event(r, stores.jobs), owner_event(r)
    kinds = [NamespacedKind(f"/apis/{GROUP}/{VERSION}", PLURAL, None, stores.jobs.index, stores.jobs.keys_of,
                            job_event(r)),
             NamespacedKind("/api/v1", "pods", LABEL_JOB_NAME, stores.pods.node_pods, stores.pods.node_pod_keys,
                            pods),
             NamespacedKind("/api/v1", "pods", LABEL_MIRROR_OF, stores.pods.mirrors, stores.pods.mirror_keys, pods),
             NamespacedKind("/api/v1", "services", LABEL_JOB_NAME, stores.services.index, stores.services.keys_of,
                            owned)]
    for seen in served:
        for watch in seen.integration.watches if seen.served else ():
            if watch.owned:
                store = stores.owned[watch.kind]
                kinds.append(NamespacedKind(watch.kind.api, watch.kind.plural, LABEL_JOB_NAME, store.index,
                                            store.keys_of, owned))
    return kinds


async def ask_discovery(kube: KubeApi, integrations: Iterable[Integration]) -> tuple[Seen, ...]:
    """Each integration, with whether the apiserver serves its API: asked once, at start (an API enabled later
    needs an operator restart)."""
    seen = []
    for integration in integrations:
        served = await kube.serves(integration.api) if integration.api is not None else True
        if integration.api is not None:
            logger.info("integration %s (%s %s): %s", integration.name, integration.api.api_version,
                        integration.api.plural, "served" if served else "not served")
        seen.append(Seen(integration, served))
    return tuple(seen)


def build_registry(config: OperatorSettings, metrics: OperatorMetrics | None = None) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    # What the clean-up stops: the watches and the re-list first, then the workers and the client.
    stopping: list[Informer | NamespacedWatches | JobResync] = []
    closing: list[Callable[[], Awaitable[None]]] = []

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure_kopf(settings)
        own_metrics = metrics or OperatorMetrics()
        kube = KubeApi.connect(config.api_concurrency, timeout=config.api_timeout_seconds,
                               on_error=lambda op, code: own_metrics.api_errors.labels(operation=op, code=code).inc())
        await wait_until_jobs_served(kube)
        served = await ask_discovery(kube, INTEGRATIONS)
        stores = Stores.for_integrations(INTEGRATIONS)
        r = Reconciler(kube, config, stores, own_metrics, integrations=served)
        closing.append(r.stop)
        own_metrics.watch_state(lambda: dict(r.applier.phases), lambda: len(r.workers.queue),
                                lambda: list(r.applier.figures.values()))
        namespaced = NamespacedWatches(kube, config.namespaces,
                                       namespaced_kinds(r, stores, served),
                                       on_listed=lambda namespace: requeue_all(r, stores.jobs, namespace))
        r.namespace_listed = namespaced.ready
        cluster = [node_informer(kube, stores.nodes, stores.pods, r, stores.jobs),
                   *(named_informer(kube, watch.kind, stores.named[watch.kind]) for seen in served if seen.served
                     for watch in seen.integration.watches if not watch.owned)]
        resync = JobResync(kube, namespaced.followed, stores.jobs, r, own_metrics, config.resync_seconds)
        stopping.extend([namespaced, *cluster, resync])
        namespaced.start()
        for informer in cluster:
            informer.start()

        async def listed() -> None:
            await asyncio.gather(namespaced.wait_started(), wait_synced(cluster))
        r.start(after=listed)
        resync.start()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # The same identity as our own client: in-cluster service account, else the kubeconfig.
        return kopf.login_via_client(**kwargs)

    @kopf.on.cleanup(registry=registry)
    async def shutdown(**_: Any) -> None:
        for watch in stopping:
            watch.stop()
        for close in closing:
            await close()

    return registry
