"""Chaos: the operator SIGKILLed at random moments while 50 jobs go create → run → fail/restart → finish.

Every job follows a script drawn from a seeded RNG (MULTINODE_CHAOS_SEED overrides the seed). A driver
thread plays the trainer: when every pod of the attempt the script is at runs, it annotates them so the
kwok stage ends them with the scripted exit codes. A chaos thread meanwhile SIGKILLs the operator and
starts a new one at once, on the same namespace. After the last restart the run must converge to what
the scripts alone say, as if no kill had happened.

Kinds of script (each job has 2 or 3 nodes, gpus 0, backoff 0, the default BlockingRecreate):

    succeed      attempt 0 all exit 0                            → Succeeded, restarts 0, attempt 0
    retry_once   attempt 0 one node exits 1|3|7|127; then all 0  → Succeeded, restarts 1, attempt 1
    retry_twice  two such failures (maxRestarts 2); then all 0   → Succeeded, restarts 2, attempt 2
    uncounted    attempt 0 one node exits 143, a rule says RestartWithoutCounting; maxRestarts 0; then
                 all 0                                           → Succeeded, restarts 0 (+1 uncounted), attempt 1
    permanent    attempt 0 one node exits 42, a rule says FailJob → Failed PodFailed, restarts 0, attempt 0
    exhaust      maxRestarts 1, two failures                     → Failed RestartLimitExceeded, restarts 1, attempt 1

In a failing attempt the other nodes either also finish (exit 0) or are left running for the operator
to stop. A pod watch records every pod of the namespace for the whole run.

What counts as a duplicate (both must be 0):

* a recreated node: one (job, attempt, index), read from the pod's labels, seen with two different uids
  over the run. Every pod must also be named `<job>-<index>-a<attempt>` after those labels. The
  apiserver forbids two objects of one name at the same time, so a second uid means the node of that
  attempt was created again after its pod was gone: it ran twice.
* an overlap: two pods of the same job and node index (of different attempts) that exist at the same
  point of the watch stream while neither has finished (phase not Succeeded/Failed; a terminating pod
  still counts). BlockingRecreate promises one live pod per node, so one GPU is never held twice.

Orphans: every pod ever created, as first seen, and every pod left at the end carries a controller
ownerReference to the uid of the existing TrainingJob its job-name label names. And no pod of a
finished job is left Pending or Running (or terminating).

Kill timing: each kill comes 0.5-3 s after the new operator answers its liveness probe, so every
incarnation does real work and the kill lands mid-reconcile (creates, deletes, status patches in
flight). Every third kill instead comes 0-0.8 s after the spawn, mostly before the probe answers:
during imports, login and the initial LISTs that fill the indices. Waiting for health before most kills is what
lets the jobs progress at all (a start takes 1.3-2 s here); the early kills cover the start-up window.
The kills go on until the driver has played every step and two more kills have hit the final
transitions (at least 8 in all), or for at most 120 s. Then the last operator runs undisturbed and the
run must converge within 60 s. The report line (`pytest -rP`) gives the kills, pods and times.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client, watch
from urllib3.exceptions import HTTPError

from multinode.api import GROUP, KIND, LABEL_ATTEMPT, LABEL_JOB_NAME, LABEL_NODE_INDEX, PLURAL, VERSION
from multinode.testing import training_job
from tests.support import jobs
from tests.support.jobs import EXIT_CODE, FINISH_AFTER
from localcluster.harness.kube import new_namespace
from localcluster.harness.operator import OperatorProcess
from localcluster.harness.waiting import wait_for

SEED = int(os.environ.get("MULTINODE_CHAOS_SEED") or 20250917)
NUM_JOBS = 50
MIN_KILLS = 8
KILLS_AFTER_LAST_ACTION = 2  # the final transitions (terminal phases, cleanup) are hit too
EARLY_KILL_EVERY = 3
KILL_AFTER_HEALTHY = (0.5, 3.0)
KILL_AFTER_SPAWN = (0.0, 0.8)
CHAOS_CAP_SECONDS = 120  # then the last operator runs undisturbed (keeps a loaded machine under ~4 min)
CONVERGE_SECONDS = 60
HOLD = "chaos.multinode.dev/hold"
HOLD_SECONDS = (0.5, 3.0)

RETRYABLE = (1, 3, 7, 127)
PERMANENT = 42
UNCOUNTED = 143
RULES = [
    {"action": "FailJob", "onExitCodes": [{"min": PERMANENT, "max": PERMANENT}]},
    {"action": "RestartWithoutCounting", "onExitCodes": [{"min": UNCOUNTED, "max": UNCOUNTED}]},
]
KINDS = ("succeed", "retry_once", "retry_twice", "uncounted", "permanent", "exhaust")
ACTIVE = ("Pending", "Running", "Unknown")
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Script:
    name: str
    kind: str
    num_nodes: int
    max_restarts: int
    steps: tuple[tuple[tuple[int, int], ...], ...]  # per attempt: (node index, exit code), the failing node last
    phase: str
    reason: str  # of the Succeeded or Failed condition
    restarts: int
    uncounted: int

    @property
    def final_attempt(self) -> int:
        return len(self.steps) - 1

    def manifest(self) -> dict:
        policy = {"maxRestarts": self.max_restarts, "backoff": {"initialSeconds": 0}, "rules": RULES}
        return training_job(self.name, self.num_nodes, gpus=0, failurePolicy=policy)


def make_scripts(rng: random.Random) -> list[Script]:
    kinds = [KINDS[i % len(KINDS)] for i in range(NUM_JOBS)]
    rng.shuffle(kinds)
    return [make_script(rng, i, kind) for i, kind in enumerate(kinds)]


def make_script(rng: random.Random, i: int, kind: str) -> Script:
    n = rng.choice((2, 3))
    ok = tuple((j, 0) for j in range(n))

    def fail(code: int) -> tuple[tuple[int, int], ...]:
        bad = rng.randrange(n)
        others = tuple((j, 0) for j in range(n) if j != bad and rng.random() < 0.5)
        return (*others, (bad, code))

    def retryable() -> tuple[tuple[int, int], ...]:
        return fail(rng.choice(RETRYABLE))

    steps, max_restarts, phase, reason, restarts, uncounted = {
        "succeed": lambda: ((ok,), 2, "Succeeded", "AllNodesSucceeded", 0, 0),
        "retry_once": lambda: ((retryable(), ok), 2, "Succeeded", "AllNodesSucceeded", 1, 0),
        "retry_twice": lambda: ((retryable(), retryable(), ok), 2, "Succeeded", "AllNodesSucceeded", 2, 0),
        "uncounted": lambda: ((fail(UNCOUNTED), ok), 0, "Succeeded", "AllNodesSucceeded", 0, 1),
        "permanent": lambda: ((fail(PERMANENT),), 2, "Failed", "PodFailed", 0, 0),
        "exhaust": lambda: ((retryable(), retryable()), 1, "Failed", "RestartLimitExceeded", 1, 0),
    }[kind]()
    return Script(f"j{i:02d}-{kind.replace('_', '-')}", kind, n, max_restarts, steps, phase, reason,
                  restarts, uncounted)


def pod_name(job: str, index: int, attempt: int) -> str:
    return f"{job}-{index}-a{attempt}"


class PodLedger:
    """Every pod of the namespace, from one watch stream for the whole run (resumed by resourceVersion)."""

    def __init__(self, api: client.ApiClient, namespace: str):
        self._core = client.CoreV1Api(api)
        self._ns = namespace
        self._watch = watch.Watch()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-ledger", daemon=True)
        self.lock = threading.Condition()
        self.live: dict[str, dict] = {}  # name -> {uid, phase, terminating, job, index, attempt}
        # (job, attempt, index), from the pod's labels -> every uid seen with them.
        self.uids_by_node: dict[tuple[str, int, int], set[str]] = defaultdict(set)
        self.misnamed: list[str] = []
        self.owner_by_pod: dict[str, tuple[str | None, tuple[str | None, ...]]] = {}  # uid -> (job label, controllers)
        self.overlaps: dict[tuple[str, ...], str] = {}  # the pods unfinished at once -> where first seen
        self.gaps = 0  # watch restarts that could not resume (410 Gone): events may have been missed
        self.error: BaseException | None = None

    def start(self) -> None:
        listed = self._core.list_namespaced_pod(self._ns)
        assert not listed.items, "the namespace starts empty"
        self._rv = listed.metadata.resource_version
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()
        if self._thread.ident is not None:
            self._thread.join(timeout=20)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    for event in self._watch.stream(self._core.list_namespaced_pod, self._ns, resource_version=self._rv,
                                                    timeout_seconds=5, deserialize=False, _request_timeout=30):
                        self._rv = event["object"]["metadata"]["resourceVersion"]
                        self._record(event["type"], event["object"])
                except client.ApiException as e:
                    if e.status != 410:
                        raise
                    self._relist()
                except HTTPError:
                    pass  # a broken stream: resume from the last resourceVersion
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            self.error = e
            with self.lock:
                self.lock.notify_all()

    def _relist(self) -> None:
        with self.lock:
            self.gaps += 1
        listed = self._core.list_namespaced_pod(self._ns)
        names = set()
        for pod in self._core.api_client.sanitize_for_serialization(listed.items):
            names.add(pod["metadata"]["name"])
            self._record("MODIFIED", pod)
        for name in set(self.live) - names:
            self._record("DELETED", {"metadata": {"name": name, "uid": self.live[name]["uid"],
                                                  "labels": {}}, "status": {}})
        self._rv = listed.metadata.resource_version

    def _record(self, kind: str, pod: dict) -> None:
        meta = pod["metadata"]
        name, uid, labels = meta["name"], meta["uid"], meta.get("labels") or {}
        with self.lock:
            if kind == "DELETED":
                if self.live.get(name, {}).get("uid") == uid:
                    del self.live[name]
                self.lock.notify_all()
                return
            job = labels.get(LABEL_JOB_NAME)
            index, attempt = int(labels.get(LABEL_NODE_INDEX, -1)), int(labels.get(LABEL_ATTEMPT, -1))
            if job is None or name != pod_name(job, index, attempt):
                self.misnamed.append(f"{name} (labels {labels})")
            self.uids_by_node[(job or "?", attempt, index)].add(uid)
            self.owner_by_pod.setdefault(uid, (job, tuple(o.get("uid") for o in meta.get("ownerReferences") or []
                                                          if o.get("kind") == KIND and o.get("controller"))))
            self.live[name] = {
                "uid": uid, "phase": (pod.get("status") or {}).get("phase") or "Pending",
                "terminating": meta.get("deletionTimestamp") is not None,
                "job": job, "index": index, "attempt": attempt,
            }
            same_node = sorted(n for n, p in self.live.items()
                               if p["job"] == job and p["index"] == index and p["phase"] not in TERMINAL)
            if len(same_node) > 1:
                self.overlaps.setdefault(tuple(same_node), f"{job} node {index}: {same_node} unfinished at once "
                                                           f"(first at {kind} {name})")
            self.lock.notify_all()

    def duplicates(self) -> dict[tuple[str, int, int], set[str]]:
        with self.lock:
            return {key: uids for key, uids in self.uids_by_node.items() if len(uids) > 1}

    def nodes_seen(self, job: str) -> set[tuple[int, int]]:
        with self.lock:
            return {(attempt, index) for j, attempt, index in self.uids_by_node if j == job}

    def running(self, names: list[str]) -> bool:
        with self.lock:
            return all(n in self.live and self.live[n]["phase"] == "Running" and not self.live[n]["terminating"]
                       for n in names)

    def busy_jobs(self) -> set[str]:
        """Jobs with a pod that is not finished (or is being deleted)."""
        with self.lock:
            return {p["job"] for p in self.live.values() if p["phase"] in ACTIVE or p["terminating"]}

    @property
    def created(self) -> int:
        with self.lock:
            return sum(len(uids) for uids in self.uids_by_node.values())


class Driver:
    """Plays the trainers: ends the pods of each job's current scripted attempt once all of them run.

    A node the script leaves running in a failing attempt gets a finalizer first, so that when the operator
    deletes it, it stays terminating for a while (0.5-3 s, seeded) instead of kwok's few milliseconds, as a
    real kubelet's grace period would. That holds BlockingRecreate's wait for old pods open long enough for
    kills to land in it, and for an overlap to show in the ledger if the wait were skipped.
    """

    def __init__(self, api: client.ApiClient, namespace: str, scripts: list[Script], ledger: PodLedger,
                 rng: random.Random):
        self._core = client.CoreV1Api(api)
        self._ns = namespace
        self._ledger = ledger
        self._scripts = scripts
        self._rng = rng
        self.stage = {s.name: 0 for s in scripts}  # the attempt whose step is still to be played
        self.held: dict[str, float] = {}  # pod name -> seconds it stays terminating once deleted
        self._release_at: dict[str, float] = {}
        self.holds = 0
        self.done_at: float | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-driver", daemon=True)

    @property
    def done(self) -> bool:
        return all(self.stage[s.name] == len(s.steps) for s in self._scripts)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._ledger.lock:
            self._ledger.lock.notify_all()
        if self._thread.ident is not None:
            self._thread.join(timeout=20)
        for name in list(self.held):  # never leave a finalizer behind: the namespace could not go
            self._release(name)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for s in self._scripts:
                    attempt = self.stage[s.name]
                    if attempt < len(s.steps) and self._ledger.running(
                            [pod_name(s.name, i, attempt) for i in range(s.num_nodes)]):
                        self._play(s, attempt)
                        self.stage[s.name] += 1
                if self.done_at is None and self.done:
                    self.done_at = time.monotonic()
                self._release_due()
                with self._ledger.lock:
                    if self._ledger.error is not None:
                        return
                    self._ledger.lock.wait(timeout=0.2)
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            self.error = e

    def _play(self, s: Script, attempt: int) -> None:
        step = s.steps[attempt]
        if any(code != 0 for _, code in step):
            finishing = {index for index, _ in step}
            for index in range(s.num_nodes):
                if index not in finishing:
                    name = pod_name(s.name, index, attempt)
                    self._core.patch_namespaced_pod(name, self._ns, {"metadata": {"finalizers": [HOLD]}})
                    self.held[name] = self._rng.uniform(*HOLD_SECONDS)
                    self.holds += 1
        for position, (index, code) in enumerate(step):
            annotations = {FINISH_AFTER: "0s", EXIT_CODE: str(code)}
            try:
                self._core.patch_namespaced_pod(pod_name(s.name, index, attempt), self._ns,
                                                {"metadata": {"annotations": annotations}})
            except client.ApiException as e:
                # A node finishing with 0 next to the failing one may already be stopped by the operator
                # (the failing node comes last, so this is rare); the failing node itself must be there.
                if e.status != 404 or position == len(step) - 1:
                    raise

    def _release_due(self) -> None:
        now = time.monotonic()
        with self._ledger.lock:
            for name, hold in self.held.items():
                pod = self._ledger.live.get(name)
                if name not in self._release_at and (pod is None or pod["terminating"]):
                    self._release_at[name] = now + hold
        for name, at in list(self._release_at.items()):
            if at <= now and name in self.held:
                self._release(name)

    def _release(self, name: str) -> None:
        try:
            self._core.patch_namespaced_pod(name, self._ns, {"metadata": {"finalizers": None}})
        except client.ApiException as e:
            if e.status != 404:
                raise
        self.held.pop(name, None)


@dataclass
class Kill:
    at: float  # seconds since the run started
    early: bool  # aimed at start-up: timed from the spawn, not from the first answered probe
    healthy: bool  # the probe answered at the moment of the kill


@dataclass
class Chaos:
    """SIGKILLs the operator at seeded random moments and starts a new one at once."""

    kubeconfig: str
    namespace: str
    logs: Path
    rng: random.Random
    t0: float
    driver: Driver
    operators: list[OperatorProcess] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    last_start: float = 0.0
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-killer", daemon=True)

    @property
    def current(self) -> OperatorProcess:
        return self.operators[-1]

    def spawn(self, wait_ready: bool = False) -> None:
        op = OperatorProcess(self.kubeconfig, [self.namespace], self.logs / f"operator-{len(self.operators):02d}.log")
        self.operators.append(op)
        self.last_start = time.monotonic()
        op.start(wait_ready=wait_ready)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)
        assert not self._thread.is_alive(), "the chaos thread did not finish"

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=30)

    def _enough(self) -> bool:
        if time.monotonic() - self.t0 > CHAOS_CAP_SECONDS:
            return True
        if len(self.kills) < MIN_KILLS or self.driver.done_at is None:
            return False
        return sum(1 for k in self.kills if self.t0 + k.at > self.driver.done_at) >= KILLS_AFTER_LAST_ACTION

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and not self._enough():
                op, spawned = self.current, self.last_start
                early = len(self.kills) % EARLY_KILL_EVERY == EARLY_KILL_EVERY - 1
                if early:
                    self._stop.wait(max(0.0, spawned + self.rng.uniform(*KILL_AFTER_SPAWN) - time.monotonic()))
                else:
                    delay = self.rng.uniform(*KILL_AFTER_HEALTHY)
                    wait_for(lambda: self._stop.is_set() or op.healthy(), timeout=60, interval=0.05,  # noqa: B023 - waited on here
                             what=f"operator healthy (log {op.log_path})")
                    self._stop.wait(delay)
                if self._stop.is_set():
                    return
                healthy = op.healthy()
                now = time.monotonic()
                op.kill()
                self.kills.append(Kill(round(now - self.t0, 2), early, healthy))
                self.spawn()
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            self.error = e


@pytest.fixture
def chaos_namespace(core: client.CoreV1Api, crd: str) -> Iterator[str]:
    # Not `t-`: the session operator never touches it; only this test's operators do.
    name = new_namespace(core, prefix="chaos")
    yield name
    for pod in core.list_namespaced_pod(name).items:  # a failed run may leave the driver's finalizer
        if HOLD in (pod.metadata.finalizers or []):
            core.patch_namespaced_pod(pod.metadata.name, name, {"metadata": {"finalizers": None}})
    core.delete_namespace(name)


def test_operator_sigkilled_at_random_converges_to_the_scripted_end_states(
    api: client.ApiClient, core: client.CoreV1Api, kubeconfig: str, chaos_namespace: str, tmp_path: Path
) -> None:
    ns = chaos_namespace
    custom = client.CustomObjectsApi(api)
    scripts = make_scripts(random.Random(SEED))
    by_name = {s.name: s for s in scripts}
    t0 = time.monotonic()
    ledger = PodLedger(api, ns)
    driver = Driver(api, ns, scripts, ledger, random.Random(SEED + 2))
    chaos = Chaos(kubeconfig, ns, tmp_path, random.Random(SEED + 1), t0, driver)
    try:
        ledger.start()
        chaos.spawn(wait_ready=True)
        chaos.start()
        for s in scripts:  # created while the kills have started
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, s.manifest())
        driver.start()
        chaos.join(timeout=CHAOS_CAP_SECONDS + 90)
        for part in (chaos, ledger, driver):
            if part.error is not None:
                raise part.error
        restarted = chaos.last_start
        wait_for(chaos.current.healthy, timeout=60, what="the last operator healthy")

        def outstanding() -> list[str]:
            if ledger.error is not None or driver.error is not None:
                raise ledger.error or driver.error  # type: ignore[misc]  # one of them is set (checked above)
            items = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
            phases = {j["metadata"]["name"]: (j.get("status") or {}).get("phase") for j in items}
            left = [f"{n}: {p}" for n, p in sorted(phases.items()) if p not in TERMINAL]
            left += [f"{n}: pods still active" for n in sorted(ledger.busy_jobs()) if phases.get(n) in TERMINAL]
            if not driver.done:
                left.append(f"driver at attempts {driver.stage}")
            return left

        deadline = time.monotonic() + CONVERGE_SECONDS
        while left := outstanding():
            assert time.monotonic() < deadline, f"not converged {CONVERGE_SECONDS}s after the last restart: {left}"
            time.sleep(0.5)
        converge_seconds = time.monotonic() - restarted
    finally:
        chaos.stop()
        driver.stop()
        for op in chaos.operators:
            if op.proc is not None and op.proc.poll() is None:
                op.stop()
        ledger.stop()
    if ledger.error is not None:
        raise ledger.error

    # End states, as the scripts say.
    items = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
    jobs_by_name = {j["metadata"]["name"]: j for j in items}
    assert sorted(jobs_by_name) == sorted(by_name)
    wrong = []
    for s in scripts:
        status = jobs_by_name[s.name].get("status") or {}
        cond = jobs.condition(jobs_by_name[s.name], s.phase) or {}
        got = (status.get("phase"), cond.get("reason"), status.get("restarts", 0),
               status.get("uncountedRestarts", 0), status.get("attempt", 0))
        want = (s.phase, s.reason, s.restarts, s.uncounted, s.final_attempt)
        if got != want:
            wrong.append(f"{s.name}: (phase, reason, restarts, uncounted, attempt) = {got}, scripted {want}")
    assert not wrong, "\n".join(wrong)

    # Duplicates: no node of an attempt created twice; no two unfinished pods of one node at once.
    assert ledger.gaps == 0, "the pod watch lost its place (410 Gone): the ledger may have missed a pod"
    assert not ledger.misnamed, ledger.misnamed
    assert ledger.duplicates() == {}, f"(job, attempt, index) seen with two uids: {ledger.duplicates()}"
    assert not ledger.overlaps, "\n".join(ledger.overlaps.values())
    # Exactly the scripted pods: numNodes per attempt up to the final one, nothing of a later attempt.
    differ = {s.name: sorted(ledger.nodes_seen(s.name) ^ {(a, i) for a in range(s.final_attempt + 1)
                                                          for i in range(s.num_nodes)})
              for s in scripts}
    assert not {k: v for k, v in differ.items() if v}, f"(attempt, index) seen vs scripted, differences: {differ}"
    assert {job for job, _, _ in ledger.uids_by_node} == set(by_name)

    # Orphans: every pod, created or left, is controlled by the existing job its label names; none left active.
    uids = {n: j["metadata"]["uid"] for n, j in jobs_by_name.items()}
    unowned = {pod: owner for pod, owner in ledger.owner_by_pod.items() if owner[1] != (uids.get(owner[0]),)}
    assert unowned == {}, f"pods created without their TrainingJob as controller (uid: (job, owners)): {unowned}"
    pods = core.list_namespaced_pod(ns, label_selector=LABEL_JOB_NAME).items
    orphans = [p.metadata.name for p in pods
               if not any(o.kind == KIND and o.controller and o.uid == uids.get(p.metadata.labels.get(LABEL_JOB_NAME))
                          for o in p.metadata.owner_references or [])]
    assert orphans == [], f"pods without their TrainingJob as controller: {orphans}"
    active = [f"{p.metadata.name}: {p.status.phase}" for p in pods
              if p.status.phase not in TERMINAL or p.metadata.deletion_timestamp]
    assert active == [], f"pods of finished jobs still active: {active}"

    kills = chaos.kills
    assert len(kills) >= MIN_KILLS, f"only {len(kills)} kills"
    early = sum(1 for k in kills if k.early)
    unhealthy = sum(1 for k in kills if not k.healthy)
    counts = {kind: sum(1 for s in scripts if s.kind == kind) for kind in KINDS}
    print(f"\nchaos seed {SEED}: {len(kills)} kills ({early} aimed at start-up, {unhealthy} landed before the probe "
          f"answered) at {[k.at for k in kills]} s; {ledger.created} pods created for {len(scripts)} jobs {counts}; "
          f"{driver.holds} deleted pods held terminating; driver done at {driver.done_at - t0:.1f} s; "
          f"converged {converge_seconds:.1f} s after the last restart; whole run {time.monotonic() - t0:.1f} s")
