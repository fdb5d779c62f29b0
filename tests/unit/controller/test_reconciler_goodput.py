"""The Reconciler keeps each job's goodput figures from the status it writes, and a new operator process
continues from the job's stored status: its first reconcile counts only the seconds since accountedUntil."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from multinode.api import TrainingJob
from multinode.api.timestamps import parse_time, rfc3339
from multinode.controller.settings import OperatorSettings
from multinode.controller.reconciler import Reconciler
from multinode.reconcile import ObservedPod
from tests.unit.controller.fake_kube import FakeKube
from tests.unit.controller.filled_stores import filled_stores
from multinode.testing import stored_job
from multinode.reconcile.ownership import OwnedName

KEY = ("ml", "llama")


def running_pods() -> list[ObservedPod]:
    return [ObservedPod(name=f"llama-{i}-a0", job_name="llama", index=i, attempt=0, phase="Running",
                        node=f"gpu-node-{i}", ready=True, owner_uid="uid-123") for i in range(2)]


def test_a_new_operator_continues_the_stored_goodput_and_exposes_it() -> None:
    now = datetime.now(timezone.utc)
    accounted = parse_time(rfc3339(now - timedelta(seconds=120)), now)  # whole seconds, as the status keeps them
    # With hang detection: only then does the job report (and keep) status.progress.
    body = stored_job(2, hangDetection={"timeoutSeconds": 600}).model_dump(by_alias=True, exclude_none=True,
                                                                            mode="json")
    body["status"] = {
        "phase": "Running", "startTime": rfc3339(accounted - timedelta(seconds=1000)), "attempt": 0,
        "attemptStartTime": rfc3339(accounted - timedelta(seconds=1000)), "numNodes": 2,
        "conditions": [{"type": "Running", "status": "True", "reason": "AllNodesRunning",
                        "lastTransitionTime": rfc3339(accounted - timedelta(seconds=970))}],
        "progress": {"step": 777, "source": "Heartbeat",
                     "firstProgressTime": rfc3339(accounted - timedelta(seconds=960))},
        "goodput": {"productiveSeconds": 960, "lostSeconds": 40, "lost": {"scheduling": 10, "startup": 30},
                    "attemptProductiveSeconds": 960, "accountedUntil": rfc3339(accounted)},
    }
    kube = FakeKube(lambda namespace, pod: None)
    reconciler = Reconciler(kube, OperatorSettings(),  # type: ignore[arg-type]
                            filled_stores(body, pods=running_pods(), services=[OwnedName("llama", "uid-123")]))

    asyncio.run(reconciler.reconcile(KEY))

    written = TrainingJob.model_validate({**body, "status": kube.statuses[-1]}).status
    assert written is not None and written.goodput is not None
    since = (parse_time(written.goodput.accounted_until or "", accounted) - accounted).total_seconds()
    assert since >= 120 and written.goodput.productive_seconds == 960 + since
    assert (written.goodput.lost.scheduling, written.goodput.lost.startup) == (10, 30)
    scraped = {(s.labels["kind"], s.labels["cause"]): s.value
               for f in reconciler.metrics.registry.collect() if f.name == "multinode_trainingjob_goodput_seconds"
               for s in f.samples}
    assert scraped == {}  # the collector is registered by the kopf startup handler, not by the Reconciler
    reconciler.metrics.watch_state(lambda: dict(reconciler.applier.phases), lambda: 0,
                                   lambda: list(reconciler.applier.figures.values()))
    scraped = {(s.labels["kind"], s.labels["cause"]): s.value
               for f in reconciler.metrics.registry.collect() if f.name == "multinode_trainingjob_goodput_seconds"
               for s in f.samples}
    assert scraped[("productive", "")] == 960 + since
    assert scraped[("lost", "scheduling")] == 10 and scraped[("lost", "startup")] == 30
    assert scraped[("lost", "restart")] == 0 and scraped[("lost", "hang")] == 0
    step = [s.value for f in reconciler.metrics.registry.collect() if f.name == "multinode_trainingjob_step"
            for s in f.samples]
    assert step == [777]

    reconciler.forget(KEY, body["metadata"]["uid"])
    assert reconciler.applier.figures == {}
