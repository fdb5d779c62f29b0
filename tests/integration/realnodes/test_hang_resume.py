"""A Hung restart resumes from the latest complete checkpoint, on real nodes under the operator installed by
helm: the real example's trainer (examples/real/train.py: DDP over gloo, DCP checkpoints every 5 steps,
mirrored by the operator's mirror pod) with one change made from outside, without touching its code: in
attempt 0, rank 1 stops for good after its step-14 heartbeat, so rank 0 blocks in step 15's all-reduce and
both go silent after the step-10 checkpoint. The operator finds the hang, restarts the gang, the next
attempt gets MULTINODE_RESUME_FROM = the mirrored step-10 checkpoint and trains on from step 11, and
status.goodput takes back the hang (last progress → restart) and the work redone (the checkpoint's mirroring
→ the last progress), which the next attempt repeats."""

from __future__ import annotations

import re
import textwrap
from datetime import datetime, timezone

import yaml
from localcluster import LocalCluster

from localcluster.harness import realexample
from localcluster.harness.kube import allow_host_path, kubectl
from localcluster.harness.waiting import wait_for
from multinode.api import GROUP, PLURAL, VERSION
from tests.support import jobs
from tests.support.realnodes import attempt_logs, clients

EXAMPLE = realexample.EXAMPLE_DIR
NAME = "hang-resume"
EVERY, HANG_AFTER, STEPS, STEP_SECONDS = 5, 14, 17, 2  # attempt 1: steps 11-17, a checkpoint at 15
TIMEOUT = 20  # hangDetection.timeoutSeconds: longer than a step and than a checkpoint's mirroring
# The example's trainer, run without torchrun (RANK and WORLD_SIZE from the operator's env) and with its
# heartbeat wrapped: rank 1 of attempt 0 sleeps after printing the HANG_AFTER heartbeat. Until its first
# heartbeat the wrapper prints a line every 5 s: the trainer says nothing while torch loads and the ranks
# meet, which on a loaded 2-core machine took longer than TIMEOUT once (a Hung before any step, by design:
# a gang that never prints is hung). The hang this test is about comes after step HANG_AFTER.
WRAPPER = textwrap.dedent(f"""
    import os, sys, threading, time
    os.environ["RANK"], os.environ["WORLD_SIZE"] = os.environ["NODE_RANK"], os.environ["NNODES"]
    beating = threading.Event()
    def starting():
        while not beating.is_set():
            print("starting", flush=True)
            beating.wait(5)
    threading.Thread(target=starting, daemon=True).start()
    sys.path.insert(0, "/app")
    import train
    beat = train.heartbeat
    def heartbeat(step, **kw):
        beating.set()
        printed = beat(step, **kw)
        if step == {HANG_AFTER} and os.environ["MULTINODE_ATTEMPT"] == "0" and os.environ["NODE_RANK"] == "1":
            train.log("rank 1 stops after step {HANG_AFTER}")
            time.sleep(3600)
        return printed
    train.heartbeat = heartbeat
    sys.exit(train.main())
""")


def _time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def _body(registry: str) -> dict:
    body = yaml.safe_load(realexample.manifest_text("trainingjob.yaml", registry))
    spec = body["spec"]
    body["metadata"]["name"] = NAME
    spec["command"] = ["python3", "-u", "-c", WRAPPER]
    values = {"TRAIN_STEPS": STEPS, "STEP_SECONDS": STEP_SECONDS, "CHECKPOINT_EVERY": EVERY}
    spec["env"] = [{"name": e["name"], "value": str(values.get(e["name"], e["value"]))} for e in spec["env"]]
    spec["hangDetection"] = {"timeoutSeconds": TIMEOUT}
    spec["failurePolicy"] = {"maxRestarts": 2, "backoff": {"initialSeconds": 0}}
    return body


def _steps(log: str) -> list[int]:
    return [int(m) for m in re.findall(r"^step=(\d+) rank=\d+ loss=", log, re.M)]



def test_a_hung_gang_resumes_from_the_latest_complete_checkpoint(
        operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    core, custom = clients(cluster)
    allow_host_path(core, namespace)  # the example mounts torch from the host
    kubectl(str(cluster.kubeconfig), "apply", "-n", namespace, "-f", str(EXAMPLE / "storage.yaml"))
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _body(cluster.registry))

    def restarted() -> dict | None:
        # The moment attempt 1's pods exist: its resumedFrom is set, and status.checkpoints.latest is still
        # the checkpoint it resumes from (attempt 1 writes its first one EVERY steps later).
        status = jobs.get_job(custom, namespace, NAME).get("status") or {}
        latest = (status.get("checkpoints") or {}).get("latest") or {}
        if status.get("attempt") == 1 and status.get("resumedFrom") and latest.get("path") == status["resumedFrom"]:
            return status
        return None

    with jobs.PhaseRecorder(cluster.api_client(), namespace, NAME, timeout_seconds=300) as seen:
        at_restart = wait_for(restarted, timeout=300, interval=0.5, what="attempt 1 resuming from a checkpoint")
    [record] = at_restart["restartHistory"]
    assert (record["reason"], record["attempt"], record["counted"]) == ("Hung", 0, True), record
    assert "(heartbeat)" in record["message"], record["message"]
    hung = [c for c in seen.conditions if c["type"] == "Progressing" and c["reason"] == "Hung"]
    assert hung and hung[0]["status"] == "False" and "rank 1 on node real-node-" in hung[0]["message"], seen.conditions
    for rank in (0, 1):  # both silent since the step-14 heartbeat
        assert re.search(rf"rank {rank} on node real-node-\d: last progress \S+Z \(step {HANG_AFTER}\)",
                         record["message"]), record["message"]
    # The latest complete checkpoint before the hang: step 10 (step 15 was never reached).
    latest = at_restart["checkpoints"]["latest"]
    resumed_step = HANG_AFTER // EVERY * EVERY
    assert latest["name"] == f"step-{resumed_step}" and latest["step"] == resumed_step, latest
    assert at_restart["resumedFrom"].endswith(f"/step-{resumed_step}"), at_restart["resumedFrom"]

    # Goodput: the hang is last progress → restart; the work redone is the checkpoint's mirroring → the
    # last progress (steps 11-14, less the mirror's delay), both in whole seconds from the status's times.
    goodput = at_restart["goodput"]["lost"]
    last = max(_time(t) for t in re.findall(r"last progress (\S+Z)", record["message"]))
    hang = int((_time(record["time"]) - last).total_seconds())
    redone = max(0, int((last - _time(latest["mirroredAt"])).total_seconds()))
    assert goodput.get("hang", 0) == hang >= TIMEOUT, (goodput, hang)
    assert goodput.get("redone", 0) == redone, (goodput, redone)
    assert 0 < redone < (HANG_AFTER - resumed_step) * STEP_SECONDS + 1, (redone, latest, last)
    print(f"\nhung restart: resumed from {latest['name']} (hung after step {HANG_AFTER}); goodput lost hang={hang}s "
          f"redone={redone}s (timeout {TIMEOUT}s)")

    # The next attempt starts at the step after the checkpoint, on every rank, and finishes.
    def training(attempt: int) -> dict[int, str] | None:
        logs = attempt_logs(core, namespace, NAME, attempt)
        return logs if len(logs) == 2 and all(_steps(log) for log in logs.values()) else None

    logs = wait_for(lambda: training(1), timeout=300, what="both ranks of attempt 1 to log steps")
    for log in logs.values():
        assert f"resumed_from={at_restart['resumedFrom']} step={resumed_step}" in log, log
        assert _steps(log)[0] == resumed_step + 1, log
    final = jobs.wait_phase(custom, namespace, NAME, "Succeeded", timeout=300)
    for log in attempt_logs(core, namespace, NAME, 1).values():
        assert re.search(rf"^done step={STEPS}", log, re.M), log
    progress = final["status"]["progress"]  # attempt 1's own, from its heartbeats
    assert progress["attempt"] == 1 and progress["source"] == "Heartbeat", progress
    lost = final["status"]["goodput"]["lost"]
    assert (lost.get("hang", 0), lost.get("redone", 0)) == (hang, redone), lost  # one restart, counted once
