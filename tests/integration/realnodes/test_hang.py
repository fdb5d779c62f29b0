"""Hang detection and stragglers on real nodes, under the operator installed by helm: it reads the real
trainers' logs through the apiserver (pods/log), so what it sees is what a kubelet really recorded.

- a real torch (gloo) gang whose rank 1 stops: rank 0 blocks in the all-reduce, both go silent after their
  heartbeats → Hung naming both ranks and nodes → a gang restart recorded with reason Hung → the next
  attempt trains to the end;
- a trainer with no change at all (plain lines, then silence) → Hung from its logs alone;
- a gang whose pods run and never print (never forms its world) → Hung;
- a rank reporting a much longer step time → condition and Event StragglersDetected naming rank and node.
"""

from __future__ import annotations

import re
import textwrap
import time
from datetime import datetime, timezone

from kubernetes import client
from localcluster import LocalCluster
from localcluster.netplan import REAL_NODE_LABEL, REAL_NODE_TOLERATION
from localcluster.realcluster import TRAINER_ENV_HOST_PATH
from localcluster.trainerenv import TRAINER_ENV_MOUNT

from multinode.api import GROUP, PLURAL, VERSION
from tests.support import jobs
from localcluster.harness.kube import allow_host_path
from multinode.testing import training_job
from localcluster.harness.waiting import wait_for
from tests.support.realnodes import clients, real_job, trainer_image

TIMEOUT = 10  # hangDetection.timeoutSeconds: the smallest the API allows
TORCH_START_TIMEOUT = 60  # for a gang that imports torch before its first heartbeat
FAIL_ON_HANG = {"maxRestarts": 3, "backoff": {"initialSeconds": 0},
                "rules": [{"action": "FailJob", "onReasons": ["Hung"]}]}



def _create(custom: client.CustomObjectsApi, namespace: str, body: dict) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def _time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def _report_latency(what: str, message: str, decided: str) -> None:
    """How long after the newest progress the hang was decided, and beyond the timeout (seconds precision)."""
    last = [_time(t) for t in re.findall(r"last progress (\S+Z)", message)]
    silent = int(re.search(r"for (\d+)s", message).group(1))
    if last:
        since = (_time(decided) - max(last)).total_seconds()
        print(f"\nhang latency [{what}]: decided {since:.0f}s after the last progress "
              f"(timeout {TIMEOUT}s; silence measured {silent}s)")
    else:
        print(f"\nhang latency [{what}]: silence measured {silent}s at the decision (timeout {TIMEOUT}s)")


# A real 2-rank gloo gang: every step an all-reduce, then a heartbeat. In attempt 0, rank 1 stops before
# step 4: rank 0 blocks in the all-reduce (gloo waits 30 min), rank 1 prints one more plain line (which
# does not count once heartbeats were seen). Attempt 1 runs every step and exits 0.
TORCH_HANG = textwrap.dedent("""
    import os, time
    import torch, torch.distributed as dist
    from multinode.progress import heartbeat
    rank, world, attempt = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"]), int(os.environ["MULTINODE_ATTEMPT"])
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=world)
    for step in range(1, 7):
        if attempt == 0 and rank == 1 and step == 4:
            print("rank 1 stops before step 4", flush=True)
            time.sleep(3600)
        t0 = time.monotonic()
        total = torch.ones(1)
        dist.all_reduce(total)
        assert total.item() == world
        heartbeat(step, step_seconds=time.monotonic() - t0, min_interval=0)
        time.sleep(0.5)
    print(f"done attempt={attempt} rank={rank}", flush=True)
    dist.destroy_process_group()
""")


def test_a_real_gang_that_hangs_in_an_all_reduce_is_restarted_and_succeeds(
        operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    core, custom = clients(cluster)
    allow_host_path(core, namespace)  # torch is mounted from the host
    name = "torch-hang"
    body = training_job(
        name, 2, gpus=1, image=trainer_image(), command=["python3", "-u", "-c", TORCH_HANG],
        resourcesPerNode={"gpus": 1, "cpu": "500m", "memory": "1Gi"},
        env=[{"name": "PYTHONPATH", "value": f"{TRAINER_ENV_MOUNT}:/opt/pylib"}],
        # Longer than the smallest: the timer runs from the gang's start, and two ranks importing torch on a
        # loaded 2-core host (make test's other worker) took over 10 s, so the gang was found hung before
        # its first heartbeat and the message named logs, not heartbeats.
        hangDetection={"timeoutSeconds": TORCH_START_TIMEOUT},
        failurePolicy={"maxRestarts": 2, "backoff": {"initialSeconds": 0}},
        podTemplate={"nodeSelector": {REAL_NODE_LABEL: "true"}, "tolerations": [REAL_NODE_TOLERATION],
                     "volumes": [{"name": "trainer-env", "hostPath": {"path": str(TRAINER_ENV_HOST_PATH),
                                                                      "type": "Directory"}}],
                     "volumeMounts": [{"name": "trainer-env", "mountPath": TRAINER_ENV_MOUNT, "readOnly": True}]})
    with jobs.PhaseRecorder(cluster.api_client(), namespace, name, timeout_seconds=300) as seen:
        _create(custom, namespace, body)
        final = jobs.wait_phase(custom, namespace, name, "Succeeded", timeout=300)
    status = final["status"]
    [record] = status["restartHistory"]
    assert record["reason"] == "Hung" and record["attempt"] == 0 and record["counted"] is True, record
    message = record["message"]
    assert "(heartbeat)" in message, message
    for rank in (0, 1):  # both ranks named with their nodes, the last step each reached
        assert re.search(rf"rank {rank} on node real-node-\d: last progress \S+Z \(step 3\)", message), message
    hung = [c for c in seen.conditions if c["type"] == "Progressing" and c["reason"] == "Hung"]
    assert hung and hung[0]["status"] == "False" and "rank 1 on node real-node-" in hung[0]["message"], seen.conditions
    assert status["attempt"] == 1 and status["restarts"] == 1
    assert status["progress"]["attempt"] == 1 and status["progress"]["source"] == "Heartbeat", status["progress"]
    # Attempt 1's own progress; the status holds the last read before the pods exited (a poll old).
    # Attempt 1's six steps take about 3 s, so the last poll can land before step 4 (seen: step 3).
    assert 1 <= status["progress"]["step"] <= 6, status["progress"]
    _report_latency("torch gang, heartbeats", message, record["time"])


ZERO_CHANGE = textwrap.dedent("""
    import time
    for i in range(5):
        print(f"epoch 0 batch {i} loss={1.0 / (i + 1):.3f}", flush=True)
        time.sleep(0.5)
    time.sleep(3600)
""")


def test_a_trainer_without_heartbeats_that_goes_silent_is_hung(operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    _, custom = clients(cluster)
    _create(custom, namespace, real_job("plain-hang", 2, ZERO_CHANGE, hangDetection={"timeoutSeconds": TIMEOUT},
                                        failurePolicy=FAIL_ON_HANG))
    final = jobs.wait_phase(custom, namespace, "plain-hang", "Failed", timeout=180)
    failed = jobs.condition(final, "Failed")
    assert failed["reason"] == "Hung", failed
    assert "(logs)" in failed["message"] and "rank 0 on node real-node-" in failed["message"], failed
    assert final["status"]["progress"]["source"] == "Logs"
    assert final["status"]["progress"]["stalledCount"] == 2
    assert {r["index"] for r in final["status"]["progress"]["stalledRanks"]} == {0, 1}
    _report_latency("plain logs", failed["message"], failed["lastTransitionTime"])


def test_a_gang_that_never_prints_is_hung(operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    _, custom = clients(cluster)
    started = time.monotonic()
    _create(custom, namespace, real_job("mute", 2, "import time; time.sleep(3600)",
                                        hangDetection={"timeoutSeconds": TIMEOUT}, failurePolicy=FAIL_ON_HANG))
    final = jobs.wait_phase(custom, namespace, "mute", "Failed", timeout=180)
    took = time.monotonic() - started
    failed = jobs.condition(final, "Failed")
    assert failed["reason"] == "Hung", failed
    for rank in (0, 1):
        assert re.search(rf"rank {rank} on node real-node-\d: no progress since the gang started", failed["message"])
    print(f"\nhang latency [never prints]: job created → Failed/Hung in {took:.1f}s (timeout {TIMEOUT}s); "
          f"{failed['message'][:80]}")


# Both ranks heartbeat every 0.3 s; rank 1 reports a step time ten times rank 0's.
STRAGGLER = textwrap.dedent("""
    import os, time
    from multinode.progress import heartbeat
    rank = int(os.environ["NODE_RANK"])
    for step in range(1, 80):
        heartbeat(step, step_seconds=2.0 if rank == 1 else 0.2, min_interval=0)
        time.sleep(0.3)
    print("done", flush=True)
""")


def test_a_rank_reporting_much_longer_steps_is_a_straggler(operator_namespace: tuple[LocalCluster, str]) -> None:
    cluster, namespace = operator_namespace
    core, custom = clients(cluster)
    _create(custom, namespace, real_job("slow-rank", 2, STRAGGLER, hangDetection={
        "timeoutSeconds": 30, "stragglers": {"factor": 2.0, "forSeconds": 2}}))

    def reported():
        job = jobs.get_job(custom, namespace, "slow-rank")
        c = jobs.condition(job, "Stragglers")
        return job if c and c["status"] == "True" else None

    job = wait_for(reported, timeout=120, what="condition Stragglers=True")
    c = jobs.condition(job, "Stragglers")
    assert c["reason"] == "StragglersDetected"
    node = next(ns["node"] for ns in job["status"]["nodeStatuses"] if ns["index"] == 1)
    assert f"rank 1 on node {node}: 2s a step, the others' median 0.2s" in c["message"], c
    assert "rank 0" not in c["message"]
    progress = job["status"]["progress"]
    assert progress["stragglerCount"] == 1 and [s["index"] for s in progress["stragglers"]] == [1], progress
    events = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                               if e.reason == "StragglersDetected"] or None,
                           timeout=30, what="a StragglersDetected Event")
    assert f"rank 1 on node {node}" in events[0].message
    jobs.wait_phase(custom, namespace, "slow-rank", "Succeeded", timeout=120)
