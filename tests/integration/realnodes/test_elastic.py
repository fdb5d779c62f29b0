"""An elastic job on real nodes (examples/real/elastic/: numNodes 3, minNodes 2), real torchrun on a c10d
rendezvous whose store is a pod of its own: rank 0's node cordoned and its pod deleted → the two left train on
at world 2 within 60 s (the store stays: it is on no training node); uncordoned → back at world 3 within
120 s; two nodes lost → the one left waits (BelowMinNodes), and grows back; the job succeeds with no resume
further back than the last checkpoint. No resize is a restart: one attempt, nothing counted, the pods that
stayed the same pods."""

from __future__ import annotations

import re
import time
from pathlib import Path

import yaml
from kubernetes import client
from localcluster import LocalCluster

from localcluster.harness import realexample
from localcluster.harness.kube import allow_host_path, kubectl, new_namespace
from localcluster.harness.waiting import wait_for
from multinode.api import LABEL_JOB_NAME
from multinode.api.constants import LABEL_RENDEZVOUS_STORE
from tests.support import jobs
from tests.support.realnodes import clients, pod_log

JOB = "real-elastic"
STEP = re.compile(r"^step=(\d+) rank=(\d+) loss=", re.M)
WORLD = re.compile(r"^attempt=\S* rank=(\d+) world=(\d+)", re.M)
RESUMED = re.compile(r"^resumed_from=\S+ step=(\d+) rank=\d+ world=(\d+)", re.M)
CHECKPOINT_EVERY = 10


def _status(custom: client.CustomObjectsApi, namespace: str) -> dict:
    return jobs.get_job(custom, namespace, JOB).get("status") or {}


def _node_pods(core: client.CoreV1Api, namespace: str) -> dict[str, client.V1Pod]:
    return {p.metadata.name: p for p in core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB_NAME}={JOB}")
            .items if LABEL_RENDEZVOUS_STORE not in (p.metadata.labels or {}) and not p.metadata.deletion_timestamp}


def _logs(core: client.CoreV1Api, namespace: str, pods: list[str]) -> dict[str, str]:
    out = {}
    for name in pods:
        try:
            out[name] = pod_log(core, namespace, name) or ""
        except client.ApiException:
            out[name] = ""  # not started yet
    return out


def _rounds(log: str) -> list[tuple[int, int, list[int]]]:
    """Each round of training the pod's workers joined: (rank, world size, steps trained in it)."""
    found = list(WORLD.finditer(log))
    ends = [m.start() for m in found[1:]] + [len(log)] if found else []
    return [(int(m.group(1)), int(m.group(2)), [int(s.group(1)) for s in STEP.finditer(log, m.end(), end)])
            for m, end in zip(found, ends, strict=True)]


def _trained_at(core: client.CoreV1Api, namespace: str, pods: list[str], world: int,
                since: dict[str, int] | None = None) -> dict[str, str] | None:
    """The pods' logs once each trained a step in a round of `world` ranks newer than its first since[name]
    rounds; None before."""
    logs = _logs(core, namespace, pods)
    for name, log in logs.items():
        newer = _rounds(log)[(since or {}).get(name, 0):]
        if not any(size == world and steps for _, size, steps in newer):
            return None
    return logs


def _resharded(log: str) -> list[tuple[int, int, int]]:
    """(step, world saved at, world loaded at) of each resume from a checkpoint saved at another world size."""
    found = []
    for resumed in RESUMED.finditer(log):
        step, loaded = int(resumed.group(1)), int(resumed.group(2))
        saved = [size for _, size, steps in _rounds(log[:resumed.start()]) if step in steps]
        if saved and saved[-1] != loaded:
            found.append((step, saved[-1], loaded))
    return found


def _seen_rounds(core: client.CoreV1Api, namespace: str, pods: list[str]) -> dict[str, int]:
    return {name: len(_rounds(log)) for name, log in _logs(core, namespace, pods).items()}


def _snapshot(core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str) -> str:
    """What a timed-out wait saw last: the job's status, each pod's place and rounds, the newest Events (CI keeps
    no cluster to look at afterwards)."""
    status = _status(custom, namespace)
    lines = [f"status.elastic={status.get('elastic')} currentNodes={status.get('currentNodes')}"]
    lines += [f"condition {c['type']}={c['status']} {c.get('reason')}: {c.get('message')}"
              for c in status.get("conditions", [])]
    pods = core.list_namespaced_pod(namespace).items
    logs = _logs(core, namespace, [p.metadata.name for p in pods])
    for pod in pods:
        scheduled = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        lines.append(f"pod {pod.metadata.name} uid={pod.metadata.uid[:8]} node={pod.spec.node_name} "
                     f"phase={pod.status.phase} deleting={pod.metadata.deletion_timestamp} scheduled="
                     f"{scheduled and (scheduled.status, scheduled.reason, scheduled.message)} rounds="
                     f"{[(rank, world, steps[-1:]) for rank, world, steps in _rounds(logs[pod.metadata.name])]}")
    events = sorted(core.list_namespaced_event(namespace).items,
                    key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp)
    lines += [f"event {e.last_timestamp} {e.involved_object.name} {e.reason}: {e.message}" for e in events[-25:]]
    return "\n".join(lines)


def _rank_of(log: str) -> int:
    return int(list(WORLD.finditer(log))[-1].group(1))


def test_an_elastic_job_shrinks_grows_waits_below_min_and_succeeds(real_operator: tuple[LocalCluster, str],
                                                                     tmp_path: Path) -> None:
    cluster, _ = real_operator
    core, custom = clients(cluster)
    namespace = new_namespace(core, prefix="realelastic")
    allow_host_path(core, namespace)  # the example mounts torch from the host
    kc = str(cluster.kubeconfig)
    folder = realexample.write_manifests(cluster.registry, tmp_path)
    manifest = yaml.safe_load(realexample.manifest_text("elastic/trainingjob.yaml", cluster.registry))
    realexample.set_env(manifest, TRAIN_STEPS="100", STEP_SECONDS="0.3", CHECKPOINT_EVERY=str(CHECKPOINT_EVERY))
    manifest["spec"]["elastic"]["resizeWindowSeconds"] = 5
    (folder / "trainingjob.yaml").write_text(yaml.safe_dump(manifest))
    cordoned: set[str] = set()
    try:
        kubectl(kc, "apply", "-n", namespace, "-f", str(folder))
        started = time.monotonic()
        first = wait_for(lambda: (pods := _node_pods(core, namespace)) and len(pods) == 3 and _trained_at(
            core, namespace, list(pods), 3) and pods, timeout=300, what="three ranks training at world 3")
        store = next(p for p in core.list_namespaced_pod(namespace, label_selector=LABEL_RENDEZVOUS_STORE).items)
        assert store.spec.node_name not in {p.spec.node_name for p in first.values()}, "the store on no training node"
        # The fourth machine (the store's) cordoned throughout: no room for a lost node's new pod but its own.
        kubectl(kc, "cordon", store.spec.node_name)
        cordoned.add(store.spec.node_name)

        # 1. Rank 0's node cordoned and its pod deleted: the two left train on at world 2, within 60 s.
        logs = _logs(core, namespace, list(first))
        rank0 = next(name for name, log in logs.items() if _rounds(log)[-1][0] == 0)
        node = first[rank0].spec.node_name
        kubectl(kc, "cordon", node)
        cordoned.add(node)
        stayed = [name for name in first if name != rank0]
        since = _seen_rounds(core, namespace, stayed)
        lost_at = time.monotonic()
        core.delete_namespaced_pod(rank0, namespace)
        wait_for(lambda: _trained_at(core, namespace, stayed, 2, since), timeout=60,
                 what="the two nodes left training at world 2", interval=0.5)
        shrink_seconds = time.monotonic() - lost_at
        status = _status(custom, namespace)
        assert [row["index"] for row in status["elastic"]["shed"]] == [int(rank0.split("-")[-2])]
        assert (status["attempt"], status["restarts"], status.get("uncountedRestarts", 0)) == (0, 0, 0)
        for name in stayed:
            assert core.read_namespaced_pod(name, namespace).metadata.uid == first[name].metadata.uid
        assert store.metadata.uid == core.read_namespaced_pod(store.metadata.name, namespace).metadata.uid

        # 2. Capacity back: the shed index's new pod runs there and the job is at world 3 within 120 s.
        since = _seen_rounds(core, namespace, stayed)
        kubectl(kc, "uncordon", node)
        cordoned.discard(node)
        back_at = time.monotonic()
        wait_for(lambda: (len(pods := _node_pods(core, namespace)) == 3 and _trained_at(
            core, namespace, list(pods), 3, since)) or None, timeout=120, what="back at world 3", interval=0.5)
        grow_seconds = time.monotonic() - back_at
        wait_for(lambda: (not (s := _status(custom, namespace))["elastic"]["shed"] and s.get("currentNodes") == 3)
                 or None, timeout=30, what="status: nothing shed, 3 nodes")

        # 3. Two nodes lost: below minNodes 2, the one left waits with the reason; capacity back, it grows again.
        pods = _node_pods(core, namespace)
        keeper = stayed[0]  # never deleted: its log holds every round
        victims = [name for name in sorted(pods) if name != keeper]
        since = _seen_rounds(core, namespace, [keeper])  # the victims' new pods have their names, and new logs
        for name in victims:
            kubectl(kc, "cordon", pods[name].spec.node_name)
            cordoned.add(pods[name].spec.node_name)
            core.delete_namespaced_pod(name, namespace)
        wait_for(lambda: (jobs.condition(jobs.get_job(custom, namespace, JOB), "Running") or {}).get("reason")
                 == "BelowMinNodes" or None, timeout=90, what="Running False, BelowMinNodes")
        for name in list(cordoned):
            kubectl(kc, "uncordon", name)
            cordoned.discard(name)
        wait_for(lambda: (len(pods := _node_pods(core, namespace)) == 3 and _trained_at(
            core, namespace, list(pods), 3, since)) or None, timeout=180, what="back at world 3 after the wait")
        step = max(_rounds(_logs(core, namespace, [keeper])[keeper])[-1][2])
        print(f"elastic: phase 3 over at step {step}, {time.monotonic() - started:.0f}s in", flush=True)

        # 4. The job finishes: Succeeded, one attempt, nothing counted; every resume from the last checkpoint.
        final = jobs.wait_phase(custom, namespace, JOB, "Succeeded", timeout=420)["status"]
        assert (final["attempt"], final["restarts"], final.get("uncountedRestarts", 0)) == (0, 0, 0)
        assert final["elastic"]["resizes"] >= 5 and final["goodput"]["reducedSeconds"] > 0
        survivor = _logs(core, namespace, [keeper])[keeper]
        # Each regroup's first step against the last step trained before it: redone steps (a resume from the
        # newest checkpoint, or from the start before the first one), never more than a checkpoint interval.
        rounds = [steps for _, _, steps in _rounds(survivor) if steps]
        redone = [max(max(r) for r in rounds[:i]) - (rounds[i][0] - 1) for i in range(1, len(rounds))]
        assert len(redone) >= 3, "shrink, grow, below min then grow: three regroups at least"
        # DCP resharded: a checkpoint saved at one world size loaded at another.
        assert _resharded(survivor), survivor[-3000:]
        assert all(0 <= r <= CHECKPOINT_EVERY for r in redone), redone
        print(f"elastic figures: shrink {shrink_seconds:.1f}s, grow {grow_seconds:.1f}s, steps redone {redone}, "
              f"resharded {_resharded(survivor)}")
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{_snapshot(core, custom, namespace)}") from failed
    finally:
        for node in cordoned:
            kubectl(kc, "uncordon", node, check=False)
        core.delete_namespace(namespace)
