"""The log prober: which pods it reads, from where on, and what it hands the planner (the HTTP call itself,
KubeApi.read_log, runs against real kubelets in tests/integration/realnodes/test_hang.py)."""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

from multinode.api.constants import PROGRESS_MARKER
from multinode.controller.kube import ApiError
from multinode.controller.progress_probe import LOG_READ_CONCURRENCY, ProgressProbe, poll_period
from multinode.controller.stores import Stores
from multinode.metrics.operator import JobFigures, OperatorMetrics
from multinode.reconcile.observe import ObservedPod
from tests.unit.reconcile.planning import pod

KEY = ("ml", "llama")
UID = "u"
STARTED = "2026-11-20T11:00:00Z"


def rank(index: int, *args: Any, **kw: Any) -> ObservedPod:
    """A trainer pod of the job (owned by its uid)."""
    return pod(index, *args, owner_uid=UID, **kw)


class LogServer:
    """Serves each pod's log as the apiserver does with timestamps=true and sinceTime (whole seconds)."""

    def __init__(self) -> None:
        self.logs: dict[str, list[str]] = {}
        self.calls: list[tuple[str, str | None]] = []
        self.broken: set[str] = set()

    async def read_log(self, namespace: str, pod: str, container: str, *, tail_lines: int, limit_bytes: int,
                       since_time: str | None = None) -> str:
        self.calls.append((pod, since_time))
        if pod in self.broken:
            raise ApiError("read_namespaced_pod_log", 403, "Forbidden", "pods/log is forbidden")
        rows = [r for r in self.logs.get(pod, []) if since_time is None or r[:19] >= since_time[:19]]
        return "".join(r + "\n" for r in rows[-tail_lines:])


def job(timeout: int | None = 30, attempt: int = 0, phase: str = "Running") -> dict:
    spec = {"hangDetection": {"timeoutSeconds": timeout}} if timeout else {}
    return {"metadata": {"name": "llama", "namespace": "ml", "uid": UID}, "spec": spec,
            "status": {"attempt": attempt, "phase": phase}}


def probe_of(server: LogServer, jobs: dict, pods: dict, swept: list) -> ProgressProbe:
    """A probe reading `jobs` ({key: [body]}) and `pods` ({key: [ObservedPod]}) from the typed stores."""
    stores = Stores()
    for key, bodies in jobs.items():
        stores.jobs.index.put(f"{key}", {key: bodies[0]})
    for (namespace, _), observed in pods.items():
        for p in observed:
            stores.pods.put_pod(namespace, p, uid=f"{namespace}/{p.name}/{p.attempt}")
    return ProgressProbe(server, stores.jobs, stores.pods, lambda raw: raw["status"]["attempt"], swept.append)  # type: ignore[arg-type]


def sweep(probe: ProgressProbe) -> None:
    async def once() -> None:
        probe._start_due_sweeps()
        probe._due.clear()  # the next call sweeps again at once
        await asyncio.gather(*probe._sweeping.values())
    asyncio.run(once())


def test_poll_period_is_a_fifth_of_the_timeout_within_bounds() -> None:
    assert (poll_period(10), poll_period(60), poll_period(3600)) == (2.0, 12.0, 30.0)


def test_reads_running_trainers_of_the_current_attempt_from_where_it_left_off() -> None:
    server, swept = LogServer(), []
    pods = {KEY: [rank(0, started_at=STARTED), rank(1, started_at=STARTED), rank(0, "Running", attempt=1),
                  rank(2, "Pending", started_at=None)]}
    jobs = {KEY: [job()]}
    server.logs = {"llama-0-a0": ["2026-11-20T11:00:01.5Z loading"],
                   "llama-1-a0": [f"2026-11-20T11:00:02.25Z {PROGRESS_MARKER} step=1"]}
    probe = probe_of(server, jobs, pods, swept)
    sweep(probe)
    assert sorted(server.calls) == [("llama-0-a0", None), ("llama-1-a0", None)] and swept == [KEY]
    first = probe.progress(KEY)
    assert first is not None and first.source == "Heartbeat" and [r.step for r in first.ranks] == [None, 1]
    server.logs["llama-1-a0"].append(f"2026-11-20T11:00:02.75Z {PROGRESS_MARKER} step=2")
    server.calls.clear()
    sweep(probe)
    # From the second of the last line read; the line read already (same second) is not counted twice.
    assert sorted(server.calls) == [("llama-0-a0", "2026-11-20T11:00:01Z"), ("llama-1-a0", "2026-11-20T11:00:02Z")]
    ranks = probe.progress(KEY).ranks
    assert ranks[1].step == 2 and ranks[1].step_seconds == 0.5


def test_a_pod_with_the_jobs_labels_and_another_owner_is_not_read() -> None:
    server, swept = LogServer(), []
    stranger = pod(1, started_at=STARTED, owner_uid="someone-else")
    server.logs = {"llama-1-a0": [f"2026-11-20T11:00:02Z {PROGRESS_MARKER} step=99"]}
    probe = probe_of(server, {KEY: [job()]}, {KEY: [rank(0, started_at=STARTED), stranger]}, swept)
    sweep(probe)
    assert [c[0] for c in server.calls] == ["llama-0-a0"]
    assert [r.index for r in probe.progress(KEY).ranks] == [0]


def test_an_unreadable_log_leaves_its_rank_out_and_jobs_without_hang_detection_are_not_read() -> None:
    server, swept = LogServer(), []
    server.broken = {"llama-1-a0"}
    probe = probe_of(server, {KEY: [job()]}, {KEY: [rank(0, started_at=STARTED), rank(1, started_at=STARTED)]}, swept)
    sweep(probe)
    assert [r.index for r in probe.progress(KEY).ranks] == [0]
    quiet = probe_of(LogServer(), {KEY: [job(timeout=None)], ("ml", "done"): [job(phase="Succeeded")]},
                     {KEY: [rank(0, started_at=STARTED)]}, swept := [])
    sweep(quiet)
    assert swept == [] and quiet.progress(KEY) is None


class ChattyLogs:
    """Every rank logged `lines` lines of `width` bytes since the last read, the newest a heartbeat: each read
    makes a fresh log, as the kubelet sends one."""

    def __init__(self, lines: int, width: int) -> None:
        self.lines, self.width = lines, width

    async def read_log(self, namespace: str, pod: str, container: str, *, tail_lines: int, limit_bytes: int,
                       since_time: str | None = None) -> str:
        await asyncio.sleep(0)  # the answer comes later, as over the network: the other reads start meanwhile
        noise = "x" * self.width
        rows = [f"2026-11-20T11:00:{i % 60:02d}.{i:06d}Z {noise}" for i in range(self.lines - 1)]
        rows.append(f"2026-11-20T11:01:00Z {PROGRESS_MARKER} step=7")
        return "\n".join(rows) + "\n"


def test_a_sweep_holds_the_text_of_a_few_logs_at_a_time_whatever_the_number_of_ranks() -> None:
    """48 ranks of 400 KiB each: the sweep keeps each rank's newest heartbeat, and its memory peaks at a few
    logs' worth (the reads in flight), not at the 19 MiB all of them add up to."""
    ranks, lines, width = 48, 200, 2048
    log_bytes = lines * (width + 28)
    probe = probe_of(ChattyLogs(lines, width), {KEY: [job()]},  # type: ignore[arg-type]
                     {KEY: [rank(i, started_at=STARTED) for i in range(ranks)]}, [])
    tracemalloc.start()
    try:
        sweep(probe)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    progress = probe.progress(KEY)
    assert progress is not None and [r.step for r in progress.ranks] == [7] * ranks
    assert peak < 4 * LOG_READ_CONCURRENCY * log_bytes, f"peak {peak / 2**20:.1f} MiB for {ranks} ranks"


def test_the_metrics_show_each_jobs_stragglers() -> None:
    # The step is multinode_trainingjob_step, copied from the status (tests/unit/metrics/test_operator.py).
    metrics = OperatorMetrics()
    figures = [JobFigures("ml", "llama", 0, step=1200, stragglers=1), JobFigures("ml", "plain", 0, stragglers=0),
               JobFigures("ml", "unwatched", 0)]
    metrics.watch_state(dict, lambda: 0, lambda: figures)
    samples = {(f.name, s.labels["job"]): s.value for f in metrics.registry.collect()
               if f.name == "multinode_trainingjob_straggler_ranks" for s in f.samples}
    assert samples == {("multinode_trainingjob_straggler_ranks", "llama"): 1.0,
                       ("multinode_trainingjob_straggler_ranks", "plain"): 0.0}
